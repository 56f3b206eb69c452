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

impl crate::kinds::Kind for CutBeforeTerminal {
    const NAME: &'static str = "cut_before_terminal";
}

impl super::RelayFault for CutBeforeTerminal {
    fn before(&self, terminal: bool) -> super::Act {
        if terminal {
            super::Act::Cut("cut_before_terminal")
        } else {
            super::Act::Pass
        }
    }

    fn holds_last_chunk(&self) -> bool {
        true
    }

    fn at_end(&self) -> super::Act {
        super::Act::Cut("cut_before_terminal")
    }
}
