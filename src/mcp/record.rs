//! What the MCP server saw: every request, notification and response the
//! agent sent (method, id, tool, a prefix of its params, when, on which
//! connection, which rule and kind answered, when the answer went out, the
//! request a `notifications/cancelled` names), bounded: the first
//! [`MAX_EXCHANGES`] are kept, the rest counted.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Exchanges kept per scenario.
pub const MAX_EXCHANGES: usize = 2000;
/// Characters of a message's params kept.
pub const PARAMS_KEEP: usize = 400;

/// One message the agent sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct McpExchange {
    /// Seconds since the run started.
    pub at: f64,
    /// `stdio#N` (the N-th stdio connection) or `http:SESSION`.
    pub conn: String,
    /// The JSON-RPC method; `<response>` for a reply to the server,
    /// `<unparseable>` for bytes that were not JSON, `<delete>` for an HTTP
    /// session ended by DELETE.
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Index among `tools/call` requests (over every connection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_index: Option<u64>,
    /// The params (or the raw bytes), cut to [`PARAMS_KEEP`] characters.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub params: String,
    /// The rule that answered (0-based), if one matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<usize>,
    /// The reply kind that answered a request (`healthy` when no rule matched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// When the request's final answer (result or error) went out, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered: Option<f64>,
    /// For `notifications/cancelled`: the request id it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancels: Option<Value>,
}

impl McpExchange {
    pub fn is_request(&self) -> bool {
        self.kind.is_some()
    }
}

/// Everything the MCP server of one scenario saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct McpRecording {
    /// The transport the row ran on.
    pub transport: String,
    pub exchanges: Vec<McpExchange>,
    /// Messages received past [`MAX_EXCHANGES`] (counted, not kept).
    pub dropped: u64,
    /// `tools/call` requests received (exact).
    pub tool_calls: u64,
    /// Requests answered by each rule (exact).
    pub rule_hits: Vec<u64>,
    /// stdio connections made (one per server process the agent started).
    pub stdio_connections: u64,
    /// HTTP sessions opened by `initialize`.
    pub http_sessions: u64,
    /// Legacy HTTP+SSE sessions opened by `GET /sse`.
    #[serde(default, skip_serializing_if = "crate::mcp::is_zero")]
    pub sse_sessions: u64,
    /// Proxy mode: the real server (its command line or URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// Proxy mode: answers of the real server relayed to the agent.
    #[serde(default, skip_serializing_if = "crate::mcp::is_zero")]
    pub relayed: u64,
    /// Proxy mode: why the real server failed (it could not start, exited,
    /// or left `initialize` unanswered); the row is then an ERROR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_error: Option<String>,
}

impl McpRecording {
    /// `tools/call` requests in flight at `t` (received, not answered by then).
    pub fn in_flight_at(&self, t: f64) -> Vec<&McpExchange> {
        self.exchanges
            .iter()
            .filter(|e| e.method == "tools/call" && e.at <= t && e.answered.is_none_or(|a| a > t))
            .collect()
    }

    /// Whether a `notifications/cancelled` naming `id` arrived after `t`.
    pub fn cancelled(&self, id: &Value, after: f64) -> bool {
        self.exchanges.iter().any(|e| {
            e.method == "notifications/cancelled" && e.at >= after && e.cancels.as_ref() == Some(id)
        })
    }
}

/// The bounded recorder behind [`McpRecording`].
#[derive(Debug, Default)]
pub struct Recorder {
    pub rec: McpRecording,
}

impl Recorder {
    /// Keep `e` if there is room; returns its index when kept.
    pub fn push(&mut self, e: McpExchange) -> Option<usize> {
        if self.rec.exchanges.len() >= MAX_EXCHANGES {
            self.rec.dropped += 1;
            return None;
        }
        self.rec.exchanges.push(e);
        Some(self.rec.exchanges.len() - 1)
    }
}

/// `s` cut to [`PARAMS_KEEP`] characters.
pub fn prefix(s: &str) -> String {
    crate::units::clip(s, PARAMS_KEEP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_in_flight_and_cancelled() {
        let mut r = Recorder::default();
        for i in 0..MAX_EXCHANGES + 5 {
            r.push(McpExchange {
                at: i as f64,
                ..Default::default()
            });
        }
        assert_eq!((r.rec.exchanges.len(), r.rec.dropped), (MAX_EXCHANGES, 5));
        let rec = McpRecording {
            exchanges: vec![
                McpExchange {
                    at: 1.0,
                    method: "tools/call".into(),
                    id: Some(3.into()),
                    kind: Some("hang".into()),
                    ..Default::default()
                },
                McpExchange {
                    at: 1.5,
                    method: "tools/call".into(),
                    id: Some(4.into()),
                    kind: Some("healthy".into()),
                    answered: Some(1.6),
                    ..Default::default()
                },
                McpExchange {
                    at: 2.5,
                    method: "notifications/cancelled".into(),
                    cancels: Some(3.into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let f: Vec<_> = rec.in_flight_at(2.0).iter().map(|e| e.id.clone()).collect();
        assert_eq!(f, vec![Some(3.into())]);
        assert!(rec.cancelled(&3.into(), 2.0) && !rec.cancelled(&4.into(), 2.0));
        assert!(prefix(&"y".repeat(1000)).chars().count() <= PARAMS_KEEP + 1);
    }
}
