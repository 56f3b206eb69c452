//! `cut_before_terminal`: relay the real stream until the event that would
//! finish the answer, then close the connection without it (the chunked body
//! is cut, not terminated). The finishing event, per wire: OpenAI chat, the
//! chunk with a `finish_reason` (or `data: [DONE]`); Responses,
//! `response.completed` / `incomplete` / `failed`; Anthropic, `message_delta`
//! (it carries `stop_reason`) or `message_stop`; Gemini, the chunk with a
//! `finishReason`. A reply that is not a stream loses the second half of its
//! last chunk.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CutBeforeTerminal {}
