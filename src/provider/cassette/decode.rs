//! An upstream's answer, read back into wire-neutral [`Recorded`] events: the
//! SSE events of a stream one by one (as the relay's splitter cuts them), or a
//! whole JSON body, on each of the four wires. Text and reasoning chunks keep
//! their offset from the response head; a tool call is kept whole (id, name,
//! joined arguments) at the offset it began; the finish reason is said in
//! OpenAI Chat terms. Unknown events are ignored; everything is bounded.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::Value;

use super::{Recorded, EVENTS_CAP, TEXT_CAP};
use crate::provider::wire::{str_at, AnswerSink};
use crate::provider::Wire;

/// The most tool calls recorded for one answer.
const CALLS_CAP: usize = 256;

/// A tool call being put together.
#[derive(Default)]
struct Call {
    at: f64,
    id: String,
    name: String,
    arguments: String,
}

/// Reads one answer.
pub(crate) struct Decoder {
    wire: Wire,
    start: Instant,
    events: Vec<Recorded>,
    /// By the wire's own key (index or item id), in order of first sight.
    calls: BTreeMap<(usize, String), Call>,
    reason: Option<String>,
    input: u64,
    output: u64,
    finish_at: f64,
    truncated: bool,
}

impl Decoder {
    pub(crate) fn new(wire: Wire) -> Decoder {
        Decoder {
            wire,
            start: Instant::now(),
            events: Vec::new(),
            calls: BTreeMap::new(),
            reason: None,
            input: 0,
            output: 0,
            finish_at: 0.0,
            truncated: false,
        }
    }

    fn now(&self) -> f64 {
        (self.start.elapsed().as_secs_f64() * 1000.0).round() / 1000.0
    }

    fn bounded(&mut self, text: &str) -> String {
        if text.len() <= TEXT_CAP {
            return text.to_string();
        }
        self.truncated = true;
        let mut end = TEXT_CAP;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text[..end].to_string()
    }

    /// A text event, within [`EVENTS_CAP`] (tool calls and the finish
    /// are always kept).
    fn push(&mut self, ev: Recorded) {
        if self.events.len() < EVENTS_CAP {
            self.events.push(ev);
        } else {
            self.truncated = true;
        }
    }

    fn add_text(&mut self, text: &str, reasoning: bool) {
        if text.is_empty() {
            return;
        }
        let (at, text) = (self.now(), self.bounded(text));
        self.push(if reasoning {
            Recorded::Reasoning { at, text }
        } else {
            Recorded::Text { at, text }
        });
    }

    /// The call under `key`, begun now if new (past [`CALLS_CAP`] calls,
    /// the last one is reused and the entry marked truncated).
    fn call_entry(&mut self, key: (usize, String)) -> &mut Call {
        let at = self.now();
        let fresh = self.calls.len();
        let key = if fresh >= CALLS_CAP && !self.calls.contains_key(&key) {
            self.truncated = true;
            self.calls.keys().next_back().cloned().unwrap_or(key)
        } else {
            key
        };
        self.calls.entry(key).or_insert_with(|| Call {
            at,
            id: format!("call_{fresh}"),
            ..Call::default()
        })
    }

    fn args(&mut self, key: (usize, String), more: &str) {
        let c = self.call_entry(key);
        if c.arguments.len() + more.len() <= TEXT_CAP {
            c.arguments.push_str(more);
        } else {
            self.truncated = true;
        }
    }

    /// One SSE event (its raw bytes, boundary included).
    pub(crate) fn sse_event(&mut self, raw: &[u8]) {
        let (name, data) = crate::provider::upstream::sse::fields(raw);
        if data.trim().is_empty() || data.trim() == "[DONE]" {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(&data) else {
            return;
        };
        let kind = if name.is_empty() {
            str_at(&v, "type").unwrap_or_default().to_string()
        } else {
            name
        };
        self.wire.format().read_event(&kind, &v, self);
    }

    /// A whole (non-streaming) JSON body.
    pub(crate) fn whole(&mut self, body: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return;
        };
        self.wire.format().read_whole(&v, self);
    }

    /// The events, tool calls and finish last; whether anything was cut.
    pub(crate) fn finish(mut self) -> (Vec<Recorded>, bool) {
        let calls = std::mem::take(&mut self.calls);
        let has_calls = !calls.is_empty();
        let mut calls: Vec<Call> = calls.into_values().collect();
        calls.sort_by(|a, b| a.at.total_cmp(&b.at));
        for c in calls {
            let arguments = if c.arguments.is_empty() {
                "{}".to_string()
            } else {
                c.arguments
            };
            self.events.push(Recorded::ToolCall {
                at: c.at,
                id: c.id,
                name: c.name,
                arguments,
            });
        }
        let reason = match self.reason.take().as_deref() {
            Some("stop" | "end_turn" | "STOP") | None if has_calls => "tool_calls".to_string(),
            Some("end_turn" | "STOP" | "stop_sequence") | None => "stop".to_string(),
            Some("max_tokens" | "MAX_TOKENS") => "length".to_string(),
            Some("tool_use") => "tool_calls".to_string(),
            Some(r) => r.to_ascii_lowercase(),
        };
        let at = if self.finish_at > 0.0 {
            self.finish_at
        } else {
            self.now()
        };
        self.events.push(Recorded::Finish {
            at,
            reason,
            input_tokens: self.input,
            output_tokens: self.output,
        });
        self.events.sort_by(|a, b| a.at().total_cmp(&b.at()));
        (self.events, self.truncated)
    }
}

impl AnswerSink for Decoder {
    fn text(&mut self, text: &str, reasoning: bool) {
        self.add_text(text, reasoning);
    }

    fn call(&mut self, key: (usize, String), id: Option<&str>, name: Option<&str>, args: &str) {
        let c = self.call_entry(key.clone());
        if let Some(id) = id {
            c.id = id.to_string();
        }
        if let Some(name) = name {
            c.name = name.to_string();
        }
        self.args(key, args);
    }

    fn reason(&mut self, r: &str) {
        self.reason = Some(r.to_string());
        self.finish_at = self.now();
    }

    fn usage(&mut self, input: Option<u64>, output: Option<u64>) {
        self.input = input.unwrap_or(self.input);
        self.output = output.unwrap_or(self.output);
    }

    fn calls_seen(&self) -> usize {
        self.calls.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(wire: Wire, events: &[&str]) -> Vec<Recorded> {
        let mut d = Decoder::new(wire);
        for e in events {
            d.sse_event(e.as_bytes());
        }
        d.finish().0
    }

    fn texts(evs: &[Recorded]) -> (String, Vec<(String, String, String)>, String) {
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut reason = String::new();
        for e in evs {
            match e {
                Recorded::Text { text: t, .. } => text.push_str(t),
                Recorded::ToolCall {
                    id,
                    name,
                    arguments,
                    ..
                } => calls.push((id.clone(), name.clone(), arguments.clone())),
                Recorded::Finish { reason: r, .. } => reason = r.clone(),
                Recorded::Reasoning { .. } => {}
            }
        }
        (text, calls, reason)
    }

    #[test]
    fn each_wire_stream_reads_back_to_the_same_answer() {
        let chat = decode(
            Wire::OpenaiChat,
            &[
                "data: {\"choices\":[{\"delta\":{\"content\":\"he\"}}]}\n\n",
                "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"shell\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n",
                "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n",
                "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
                "data: [DONE]\n\n",
            ],
        );
        let want = (
            "he".to_string(),
            vec![("c1".into(), "shell".into(), "{\"a\":1}".into())],
            "tool_calls".to_string(),
        );
        assert_eq!(texts(&chat), want);
        let responses = decode(
            Wire::OpenaiResponses,
            &[
                "event: response.output_text.delta\ndata: {\"delta\":\"he\"}\n\n",
                "event: response.output_item.done\ndata: {\"output_index\":1,\"item\":{\"type\":\"function_call\",\"id\":\"fc\",\"call_id\":\"c1\",\"name\":\"shell\",\"arguments\":\"{\\\"a\\\":1}\"}}\n\n",
                "event: response.completed\ndata: {\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":2}}}\n\n",
            ],
        );
        assert_eq!(texts(&responses), want);
        let anthropic = decode(
            Wire::Anthropic,
            &[
                "event: content_block_delta\ndata: {\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"he\"}}\n\n",
                "event: content_block_start\ndata: {\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"c1\",\"name\":\"shell\"}}\n\n",
                "event: content_block_delta\ndata: {\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":1}\"}}\n\n",
                "event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":3}}\n\n",
            ],
        );
        assert_eq!(texts(&anthropic), want);
        let gemini = decode(
            Wire::Gemini,
            &[
                "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"he\"}]}}]}\n\n",
                "data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"id\":\"c1\",\"name\":\"shell\",\"args\":{\"a\":1}}}]},\"finishReason\":\"STOP\"}]}\n\n",
            ],
        );
        assert_eq!(texts(&gemini), want);
    }

    #[test]
    fn whole_bodies_and_usage() {
        let mut d = Decoder::new(Wire::OpenaiChat);
        d.whole(br#"{"choices":[{"message":{"content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":2}}"#);
        let evs = d.finish().0;
        assert_eq!(texts(&evs).0, "hello");
        assert!(matches!(
            evs.last(),
            Some(Recorded::Finish { reason, input_tokens: 7, output_tokens: 2, .. }) if reason == "stop"
        ));
        let mut d = Decoder::new(Wire::Anthropic);
        d.whole(br#"{"content":[{"type":"tool_use","id":"t","name":"shell","input":{"x":1}}],"stop_reason":"tool_use"}"#);
        let (_, calls, reason) = texts(&d.finish().0);
        assert_eq!(
            calls,
            vec![("t".into(), "shell".into(), "{\"x\":1}".into())]
        );
        assert_eq!(reason, "tool_calls");
    }

    #[test]
    fn bounded() {
        let mut d = Decoder::new(Wire::OpenaiChat);
        for _ in 0..EVENTS_CAP + 10 {
            d.sse_event(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n");
        }
        let (evs, truncated) = d.finish();
        assert!(truncated && evs.len() == EVENTS_CAP + 1);
        assert!(matches!(evs.last(), Some(Recorded::Finish { .. })));
    }
}
