//! The one message model: a conversation message as the agent sent it to the
//! model (each wire's request parsing, the provider's recording, cassettes)
//! and as the agent persisted it (the store readers), read by the oracle's
//! history checks without adapting either. Roles are `system` / `user` /
//! `assistant` / `tool`; an assistant message carries its tool calls with
//! their ids, a `tool` message the id it answers. Contents are bounded to
//! [`CONTENT_KEEP_CHARS`] with the full length kept.

use serde::{Deserialize, Serialize};

/// How much of one message's content (and of one call's arguments) is kept;
/// the full length is always kept.
pub const CONTENT_KEEP_CHARS: usize = 16 * 1024;

/// One tool call of an assistant message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    /// The tool's name (empty where a store keeps only the id).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The arguments string, bounded to [`CONTENT_KEEP_CHARS`] (empty where
    /// a store keeps only the id).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub arguments: String,
}

impl ToolCall {
    /// A call with its id, name and arguments.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// A call known by its id only (a store's id column).
    pub fn id_only(id: impl Into<String>) -> ToolCall {
        ToolCall::new(id, "", "")
    }
}

/// One message, sent or stored.
///
/// Saved observations from before the one model stored a persisted
/// message's calls as `tool_call_ids: [ID, ...]`; that shape is still read
/// (as calls known by their id only).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "Saved")]
pub struct Message {
    pub role: String,
    /// Text content (string content, or the text parts joined), bounded to
    /// [`CONTENT_KEEP_CHARS`] characters.
    pub content: String,
    /// Length in characters of the whole content before bounding.
    pub content_chars: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// An assistant message's tool calls (a store's unparseable calls column
    /// is one call with the id `<unparseable>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Reasoning sent back with the message (Responses `reasoning` items,
    /// Anthropic `thinking` blocks, chat `reasoning_content` / `reasoning`,
    /// Gemini `thought: true` parts), bounded like `content`. Kept for the
    /// observation; not judged.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reasoning: String,
    /// Length in characters of the whole reasoning before bounding.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_chars: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Message {
    /// A message of `role` with `content` (its length counted).
    pub fn new(role: &str, content: impl Into<String>) -> Message {
        let content = content.into();
        Message {
            role: role.to_string(),
            content_chars: content.chars().count(),
            content,
            ..Message::default()
        }
    }

    /// A `tool` message answering the call `id`.
    pub fn tool_result(id: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            tool_call_id: Some(id.into()),
            ..Message::new("tool", content)
        }
    }

    /// An assistant message making `calls`.
    pub fn assistant_calls(calls: Vec<ToolCall>) -> Message {
        Message {
            tool_calls: calls,
            ..Message::new("assistant", "")
        }
    }

    /// The ids of this message's tool calls, in order.
    pub fn call_ids(&self) -> Vec<&str> {
        self.tool_calls.iter().map(|c| c.id.as_str()).collect()
    }
}

/// Where a conversation's open tool step ends: the latest `tool` message,
/// when the model has not answered since (no assistant message with text or
/// calls after it). Whatever else follows the result does not close the
/// step: agents append a note after each result (Claude Code: a text block in
/// the result's message, or a further user message). `None`: the request
/// does not follow a tool result.
pub fn latest_result(messages: &[Message]) -> Option<usize> {
    let at = messages.iter().rposition(|m| m.role == "tool")?;
    let answered = |m: &Message| {
        m.role == "assistant" && (!m.tool_calls.is_empty() || !m.content.trim().is_empty())
    };
    (!messages[at + 1..].iter().any(answered)).then_some(at)
}

/// The request follows a tool result ([`latest_result`]): the responder's
/// `after_tool`.
pub fn after_tool(messages: &[Message]) -> bool {
    latest_result(messages).is_some()
}

/// A message as saved: the current shape, or a persisted message's older
/// `tool_call_ids`.
#[derive(Deserialize)]
struct Saved {
    role: String,
    content: String,
    content_chars: usize,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
    #[serde(default)]
    tool_call_ids: Vec<String>,
    #[serde(default)]
    reasoning: String,
    #[serde(default)]
    reasoning_chars: usize,
}

impl From<Saved> for Message {
    fn from(s: Saved) -> Message {
        let mut tool_calls = s.tool_calls;
        if tool_calls.is_empty() {
            tool_calls = s.tool_call_ids.into_iter().map(ToolCall::id_only).collect();
        }
        Message {
            role: s.role,
            content: s.content,
            content_chars: s.content_chars,
            tool_call_id: s.tool_call_id,
            tool_calls,
            reasoning: s.reasoning,
            reasoning_chars: s.reasoning_chars,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sent_message_round_trips() {
        let mut m = Message::assistant_calls(vec![ToolCall::new("c1", "shell", "{\"a\":1}")]);
        m.reasoning = "think".into();
        m.reasoning_chars = 5;
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<Message>(&json).unwrap(), m);
        let plain = serde_json::to_value(Message::new("user", "hé")).unwrap();
        assert_eq!(
            plain,
            serde_json::json!({"role": "user", "content": "hé", "content_chars": 2})
        );
    }

    #[test]
    fn a_result_is_the_latest_until_the_model_answers() {
        let call = || Message::assistant_calls(vec![ToolCall::new("c1", "shell", "{}")]);
        let user = |t: &str| Message::new("user", t);
        let result = || Message::tool_result("c1", "out");
        let opening = [user("go"), call(), result()];
        let with = |tail: &[Message]| [&opening[..], tail].concat();
        assert_eq!(latest_result(&opening), Some(2));
        assert_eq!(latest_result(&with(&[user("a note")])), Some(2));
        assert_eq!(
            latest_result(&with(&[user("a note"), user("another")])),
            Some(2)
        );
        // Claude Code 2.1.303 on the Anthropic wire: a system message after it.
        let tokens = Message::new(
            "system",
            "<total_tokens>14984210 tokens left</total_tokens>",
        );
        assert_eq!(latest_result(&with(&[tokens])), Some(2));
        // An empty assistant message is no answer.
        assert_eq!(
            latest_result(&with(&[Message::new("assistant", " ")])),
            Some(2)
        );
        assert_eq!(
            latest_result(&with(&[Message::new("assistant", "done"), user("next")])),
            None
        );
        assert_eq!(latest_result(&with(&[call()])), None);
        assert_eq!(latest_result(&[user("go")]), None);
        // A continued conversation (Responses `previous_response_id`) sends
        // the result without the call.
        assert!(after_tool(&[result(), user("a note")]));
    }

    #[test]
    fn an_older_persisted_message_is_read_by_its_call_ids() {
        let old = r#"{"role":"assistant","content":"","content_chars":0,"tool_call_ids":["c1","__fake_id__"]}"#;
        let m: Message = serde_json::from_str(old).unwrap();
        assert_eq!(m.call_ids(), ["c1", "__fake_id__"]);
        assert_eq!(m.tool_calls[1], ToolCall::id_only("__fake_id__"));
        let tool = r#"{"role":"tool","content":"ok","content_chars":2,"tool_call_id":"c1"}"#;
        let t: Message = serde_json::from_str(tool).unwrap();
        assert_eq!(t, Message::tool_result("c1", "ok"));
    }
}
