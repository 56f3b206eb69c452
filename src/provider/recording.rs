//! What the provider remembers of each request: enough for the oracle (roles,
//! tool call ids, bounded contents, sizes) and never a whole 30 MB body.

use serde::{Deserialize, Serialize};

/// How much of one message's content is kept; the full length is always kept.
pub const CONTENT_KEEP_CHARS: usize = 16 * 1024;
/// How many header bytes are kept per request.
pub const HEADERS_KEEP_BYTES: usize = 4 * 1024;

/// Which role a request played.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// Carries `tools`, not a probe: consumes the scenario's responder.
    Main,
    /// Latest user message carries `[[probe:NONCE]]`: answered `alive NONCE`.
    Probe,
    /// No `tools` (titles, summaries): a plain short answer.
    Aux,
}

/// One tool call inside a message, as sent on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireToolCall {
    pub id: String,
    pub name: String,
    /// The arguments string, bounded to [`CONTENT_KEEP_CHARS`].
    pub arguments: String,
}

/// One message of a request's `messages`, bounded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireMessage {
    pub role: String,
    /// Text content (string content, or the text parts joined), bounded to
    /// [`CONTENT_KEEP_CHARS`] characters.
    pub content: String,
    /// Length in characters of the whole content before bounding.
    pub content_chars: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<WireToolCall>,
}

/// One request as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Order of arrival, from 0, over all requests of this provider.
    pub seq: u64,
    /// Seconds since the provider started.
    pub at: f64,
    pub kind: CallKind,
    /// For `Main`: index of this main call in the faulted turn, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main_index: Option<u64>,
    pub method: String,
    pub path: String,
    /// Header lines `name: value`, bounded to [`HEADERS_KEEP_BYTES`] in all.
    pub headers: Vec<String>,
    /// Body size in bytes as received.
    pub size: usize,
    pub stream: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Parsed messages (empty if the body was not JSON).
    pub messages: Vec<WireMessage>,
    /// True when any content or argument string was cut to its bound.
    pub truncated: bool,
    /// The reply kind served (`text`, `hang`, ..., `not_found`, `bad_request`).
    pub reply: String,
    /// Responses wire: the stored response this request continued (its
    /// conversation is prepended to `messages`), or named and was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_response_id: Option<String>,
}

/// A tool call the provider issued (in logical terms, before tool mapping).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IssuedToolCall {
    pub id: String,
    /// Logical tool name as the scenario wrote it.
    pub tool: String,
    /// Logical arguments after templating (a JSON object, or a string for raw args).
    pub args: serde_json::Value,
    /// Main call index that issued it.
    pub main_index: u64,
}

/// Everything recorded by one provider.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    pub requests: Vec<RequestRecord>,
    pub issued_tool_calls: Vec<IssuedToolCall>,
    /// Exact counts (kept by atomics, so they hold even under a retry storm).
    pub main_calls: u64,
    pub probe_calls: u64,
    pub aux_calls: u64,
}
