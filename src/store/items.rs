//! Item-shaped stores (Responses items, Anthropic content blocks: one row per
//! item) folded into the message model, and the turn building that JSONL
//! transcripts share: consecutive assistant entries (text, then one row per
//! tool call) form one assistant message with several tool calls; each
//! result is a `tool` message carrying the id it answers. Pairing is left to
//! the oracle, which pairs by id and names placeholder ids.

use crate::message::{Message, ToolCall, CONTENT_KEEP_CHARS};

/// A message being built: content kept within [`CONTENT_KEEP_CHARS`] while
/// its whole length is counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Draft {
    pub role: String,
    content: String,
    kept: usize,
    chars: usize,
    pub tool_call_id: Option<String>,
    pub call_ids: Vec<String>,
}

impl Draft {
    pub fn new(role: &str) -> Draft {
        Draft {
            role: role.to_string(),
            ..Draft::default()
        }
    }

    /// Append `text` (a newline between parts).
    pub fn push_text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let sep = usize::from(self.chars > 0);
        if sep == 1 && self.kept < CONTENT_KEEP_CHARS {
            self.content.push('\n');
            self.kept += 1;
        }
        self.chars += sep;
        for c in text.chars() {
            self.chars += 1;
            if self.kept < CONTENT_KEEP_CHARS {
                self.content.push(c);
                self.kept += 1;
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.chars == 0 && self.call_ids.is_empty() && self.tool_call_id.is_none()
    }

    pub fn finish(self) -> Message {
        Message {
            role: self.role,
            content: self.content,
            content_chars: self.chars,
            tool_call_id: self.tool_call_id,
            tool_calls: self.call_ids.into_iter().map(ToolCall::id_only).collect(),
            ..Message::default()
        }
    }
}

/// Turns: consecutive assistant drafts merged into one (text joined, calls
/// in order); everything else kept as it is, in order.
pub(crate) fn turns(drafts: Vec<Draft>) -> Vec<Message> {
    let mut out: Vec<Draft> = Vec::new();
    for d in drafts {
        match out.last_mut() {
            Some(last) if last.role == "assistant" && d.role == "assistant" => {
                let text = d.content.clone();
                let extra = d.chars.saturating_sub(d.kept);
                last.push_text(&text);
                last.chars += extra;
                last.call_ids.extend(d.call_ids);
            }
            _ => out.push(d),
        }
    }
    out.into_iter().map(Draft::finish).collect()
}

/// One row of an item-shaped query: `kind, content, call_id[, name]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ItemRow {
    pub kind: String,
    pub content: Option<String>,
    pub call_id: Option<String>,
}

/// What an item row's `kind` is.
enum Kind {
    Call,
    Result,
    Reasoning,
    Message(String),
}

fn kind(k: &str) -> Kind {
    match k.trim().to_ascii_lowercase().as_str() {
        "function_call" | "tool_use" | "tool_call" | "custom_tool_call" | "local_shell_call" => {
            Kind::Call
        }
        "function_call_output"
        | "tool_result"
        | "tool"
        | "custom_tool_call_output"
        | "local_shell_call_output" => Kind::Result,
        "reasoning" | "thinking" | "redacted_thinking" => Kind::Reasoning,
        "developer" => Kind::Message("system".into()),
        "model" | "text" | "output_text" => Kind::Message("assistant".into()),
        other => Kind::Message(other.to_string()),
    }
}

/// Fold item rows into messages: a call row is part of the assistant turn
/// (the text row before it included), a result row is a `tool` message
/// answering its `call_id` (an empty id stays empty: the oracle names it),
/// reasoning rows carry no message text.
pub fn fold(rows: Vec<ItemRow>) -> Vec<Message> {
    let mut drafts = Vec::new();
    for r in rows {
        let id = r.call_id.unwrap_or_default();
        match kind(&r.kind) {
            Kind::Call => {
                let mut d = Draft::new("assistant");
                d.call_ids.push(id);
                drafts.push(d);
            }
            Kind::Result => {
                let mut d = Draft::new("tool");
                d.push_text(r.content.as_deref().unwrap_or(""));
                d.tool_call_id = Some(id);
                drafts.push(d);
            }
            Kind::Reasoning => {}
            Kind::Message(role) => {
                let mut d = Draft::new(&role);
                d.push_text(r.content.as_deref().unwrap_or(""));
                drafts.push(d);
            }
        }
    }
    turns(drafts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, content: &str, id: &str) -> ItemRow {
        ItemRow {
            kind: kind.into(),
            content: Some(content.into()),
            call_id: (!id.is_empty()).then(|| id.to_string()),
        }
    }

    #[test]
    fn consecutive_calls_are_one_turn_and_outputs_are_tool_messages() {
        let m = fold(vec![
            row("user", "go", ""),
            row("reasoning", "hmm", ""),
            row("assistant", "running two", ""),
            row("function_call", "{\"command\":\"a\"}", "c1"),
            row("function_call", "{\"command\":\"b\"}", "c2"),
            row("function_call_output", "A", "c1"),
            row("function_call_output", "B", "c2"),
            row("assistant", "done", ""),
        ]);
        let roles: Vec<&str> = m.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool", "assistant"]);
        assert_eq!(m[1].call_ids(), ["c1", "c2"]);
        assert_eq!(m[1].content, "running two");
        assert_eq!(m[2].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(m[3].content, "B");
    }

    #[test]
    fn a_merged_turn_stays_bounded_and_counts_every_char() {
        let big = "x".repeat(CONTENT_KEEP_CHARS + 10);
        let m = fold(vec![row("assistant", &big, ""), row("assistant", "yz", "")]);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].content.chars().count(), CONTENT_KEEP_CHARS);
        assert_eq!(m[0].content_chars, CONTENT_KEEP_CHARS + 10 + 1 + 2);
    }
}
