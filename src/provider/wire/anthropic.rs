//! Anthropic Messages: `POST /v1/messages` (any query string, any
//! `anthropic-version`), `GET /v1/models`. Streams `message_start`, `ping`,
//! `content_block_start` (`thinking`, `text`, `tool_use`),
//! `content_block_delta` (`thinking_delta`, `text_delta`, `input_json_delta`),
//! `content_block_stop`, `message_delta` (`stop_reason`), `message_stop`; a
//! whole `message` otherwise. Errors are
//! `{"type": "error", "error": {"type", "message"}}` with a `retry-after`
//! header (`rate_limit_error` 429, `overloaded_error` 529, ...), and an
//! `error` event mid-stream. Parallel tool calls are several `tool_use` blocks.
//!
//! Requests: `system` (string or text blocks) and `messages` whose content is
//! a string or blocks; a user message's `tool_result` blocks become `tool`
//! messages answering `tool_use_id`, an assistant's `tool_use` blocks its tool
//! calls.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::request::{content_text, offers_tools, str_field, Request};
use crate::message::{Message, ToolCall};
use super::{str_at, u64_at, AnswerSink, args_object, json_error, typed_frame, Answer, ErrorInfo, Event, Meta, Route};

/// Anthropic's error `type` for a status.
pub(crate) fn error_type_for(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

fn error_body(e: &ErrorInfo) -> Value {
    let kind = e.code.as_deref().unwrap_or(error_type_for(e.status));
    json!({"type": "error", "error": {"type": kind, "message": e.message}})
}

/// Chat finish reasons in Anthropic terms.
fn stop_reason(reason: &str) -> &str {
    match reason {
        "stop" => "end_turn",
        "tool_calls" => "tool_use",
        "length" => "max_tokens",
        "content_filter" => "refusal",
        other => other,
    }
}

fn message(meta: &Meta, content: Vec<Value>, stop: Option<&str>, output_tokens: u64) -> Value {
    json!({
        "id": meta.id,
        "type": "message",
        "role": "assistant",
        "model": meta.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": {
            "input_tokens": (meta.request_bytes as u64).div_ceil(4),
            "output_tokens": output_tokens,
        },
    })
}

/// Which block is open in the stream.
#[derive(PartialEq)]
enum Open {
    None,
    Thinking,
    Text,
}

/// One Anthropic reply's streaming state.
pub(crate) struct Stream {
    meta: Meta,
    next_block: usize,
    open: Open,
    /// Tool call index → content block index.
    calls: BTreeMap<usize, usize>,
    /// `message_start` was sent.
    started: bool,
}

impl Stream {
    pub fn new(meta: &Meta) -> Stream {
        Stream {
            meta: meta.clone(),
            next_block: 0,
            open: Open::None,
            calls: BTreeMap::new(),
            started: false,
        }
    }

    fn emit(out: &mut Vec<u8>, kind: &str, v: Value) {
        typed_frame(out, kind, &v);
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        let index = self.next_block - usize::from(self.open != Open::None);
        match std::mem::replace(&mut self.open, Open::None) {
            Open::None => {}
            Open::Thinking => {
                Stream::emit(
                    out,
                    "content_block_delta",
                    json!({"index": index, "delta": {"type": "signature_delta", "signature": "chaosrun"}}),
                );
                Stream::emit(out, "content_block_stop", json!({"index": index}));
            }
            Open::Text => Stream::emit(out, "content_block_stop", json!({"index": index})),
        }
    }

    fn open(&mut self, out: &mut Vec<u8>, kind: Open, block: Value) -> usize {
        if self.open != kind || kind == Open::None {
            self.close(out);
            let index = self.next_block;
            self.next_block += 1;
            Stream::emit(
                out,
                "content_block_start",
                json!({"index": index, "content_block": block}),
            );
            self.open = kind;
        }
        self.next_block - 1
    }
}

impl super::Encoder for Stream {
    fn event(&mut self, ev: &Event, out: &mut Vec<u8>) {
        match ev {
            Event::Start => {
                let m = message(&self.meta, Vec::new(), None, 1);
                Stream::emit(out, "message_start", json!({"message": m}));
                Stream::emit(out, "ping", json!({}));
                self.started = true;
            }
            Event::Keepalive if !self.started => self.event(&Event::Start, out),
            Event::Keepalive => Stream::emit(out, "ping", json!({})),
            Event::ReasoningDelta(t) => {
                let block = json!({"type": "thinking", "thinking": "", "signature": ""});
                let index = self.open(out, Open::Thinking, block);
                Stream::emit(
                    out,
                    "content_block_delta",
                    json!({"index": index, "delta": {"type": "thinking_delta", "thinking": t}}),
                );
            }
            Event::TextDelta(t) => {
                let block = json!({"type": "text", "text": ""});
                let index = self.open(out, Open::Text, block);
                Stream::emit(
                    out,
                    "content_block_delta",
                    json!({"index": index, "delta": {"type": "text_delta", "text": t}}),
                );
            }
            Event::ToolCallStart { index, id, name } => {
                let block = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                let block_index = self.open(out, Open::None, block);
                // A tool_use block is closed by its ToolCallEnd, not by `close`.
                self.open = Open::None;
                self.calls.insert(*index, block_index);
            }
            Event::ToolArgsDelta { index, text } => {
                if let Some(block) = self.calls.get(index) {
                    Stream::emit(
                        out,
                        "content_block_delta",
                        json!({"index": block, "delta": {"type": "input_json_delta", "partial_json": text}}),
                    );
                }
            }
            Event::ToolCallEnd { index } => {
                if let Some(block) = self.calls.remove(index) {
                    Stream::emit(out, "content_block_stop", json!({"index": block}));
                }
            }
            Event::Finish { reason, usage } => {
                self.close(out);
                Stream::emit(
                    out,
                    "message_delta",
                    json!({"delta": {"stop_reason": stop_reason(reason), "stop_sequence": null},
                           "usage": {"output_tokens": usage.completion_tokens}}),
                );
                Stream::emit(out, "message_stop", json!({}));
            }
            Event::Error(e) => {
                let kind = e.code.as_deref().unwrap_or(error_type_for(e.status));
                let error = json!({"error": {"type": kind, "message": e.message}});
                typed_frame(out, "error", &error);
            }
        }
    }
}

// ---- request ---------------------------------------------------------------

pub(crate) fn parse_request(v: &Value) -> Result<Request, String> {
    let mut messages = Vec::new();
    match v.get("system") {
        None | Some(Value::Null) => {}
        Some(s @ (Value::String(_) | Value::Array(_))) => {
            messages.push(Message::new("system", content_text(Some(s))))
        }
        Some(_) => return Err("`system` must be a string or an array of text blocks".into()),
    }
    match v.get("messages") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for m in list {
                message_in(m, &mut messages)?;
            }
        }
        Some(_) => return Err("`messages` must be an array".into()),
    }
    Ok(Request {
        model: str_field(v, "model"),
        stream: v.get("stream").and_then(Value::as_bool).unwrap_or(false),
        has_tools: offers_tools(v),
        tools: super::request::offered_in(v),
        messages,
        previous_response_id: None,
    })
}

fn message_in(m: &Value, messages: &mut Vec<Message>) -> Result<(), String> {
    let role = m
        .get("role")
        .and_then(Value::as_str)
        .ok_or("every message needs a string `role`")?;
    let blocks = match m.get("content") {
        Some(Value::Array(blocks)) => blocks,
        other => {
            messages.push(Message::new(role, content_text(other)));
            return Ok(());
        }
    };
    let mut text = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let mut thinking = Vec::new();
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push(b.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("thinking") => {
                thinking.push(b.get("thinking").and_then(Value::as_str).unwrap_or(""))
            }
            Some("tool_use") => calls.push(ToolCall::new(
                str_field(b, "id").unwrap_or_default(),
                str_field(b, "name").unwrap_or_default(),
                super::request::args_string(b.get("input")),
            )),
            Some("tool_result") => results.push(Message::tool_result(
                str_field(b, "tool_use_id").unwrap_or_default(),
                content_text(b.get("content")),
            )),
            // redacted thinking, images, documents: no text of the message model.
            _ => {}
        }
    }
    let has_results = !results.is_empty();
    messages.extend(results);
    if !text.is_empty() || !calls.is_empty() || !thinking.is_empty() || !has_results {
        messages.push(Message {
            tool_calls: calls,
            reasoning: thinking.join("\n"),
            ..Message::new(role, text.join("\n"))
        });
    }
    Ok(())
}

/// This wire behind the one [`super::WireFormat`] trait.
pub(crate) struct Anthropic;

impl super::WireFormat for Anthropic {
    /// One event of an upstream's Messages stream.
    fn read_event(&self, kind: &str, v: &Value, sink: &mut dyn AnswerSink) {
        let i = u64_at(v, "index").unwrap_or(0) as usize;
        match kind {
            "message_start" => {
                let input = u64_at(&v["message"]["usage"], "input_tokens").unwrap_or(0);
                sink.usage(Some(input), None);
            }
            "content_block_start" => {
                let b = &v["content_block"];
                match str_at(b, "type") {
                    Some("tool_use") => {
                        let id = str_at(b, "id").unwrap_or_default();
                        let name = str_at(b, "name").unwrap_or_default();
                        sink.call((i, String::new()), Some(id), Some(name), "");
                    }
                    Some("text") => sink.text(str_at(b, "text").unwrap_or(""), false),
                    _ => {}
                }
            }
            "content_block_delta" => {
                let d = &v["delta"];
                match str_at(d, "type") {
                    Some("text_delta") => sink.text(str_at(d, "text").unwrap_or(""), false),
                    Some("thinking_delta") => sink.text(str_at(d, "thinking").unwrap_or(""), true),
                    Some("input_json_delta") => {
                        let more = str_at(d, "partial_json").unwrap_or("");
                        sink.call((i, String::new()), None, None, more)
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                sink.usage(None, u64_at(&v["usage"], "output_tokens"));
                if let Some(r) = str_at(&v["delta"], "stop_reason") {
                    sink.reason(r);
                }
            }
            _ => {}
        }
    }

    /// A whole message of an upstream.
    fn read_whole(&self, v: &Value, sink: &mut dyn AnswerSink) {
        let usage = &v["usage"];
        let tokens = |k| Some(u64_at(usage, k).unwrap_or(0));
        sink.usage(tokens("input_tokens"), tokens("output_tokens"));
        for (i, b) in v["content"].as_array().into_iter().flatten().enumerate() {
            match str_at(b, "type") {
                Some("text") => sink.text(str_at(b, "text").unwrap_or(""), false),
                Some("thinking") => sink.text(str_at(b, "thinking").unwrap_or(""), true),
                Some("tool_use") => {
                    let args = b["input"].to_string();
                    let name = Some(str_at(b, "name").unwrap_or_default());
                    sink.call((i, String::new()), str_at(b, "id"), name, &args);
                }
                _ => {}
            }
        }
        if let Some(r) = str_at(v, "stop_reason") {
            sink.reason(r);
        }
    }

    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn base_path(&self) -> &'static str {
        ""
    }

    fn route(&self, method: &str, path: &str) -> Route {
        match (method, path) {
            ("POST", "/v1/messages") => Route::Generate {
                stream: None,
                model: None,
            },
            ("GET", "/v1/models") => Route::Models,
            _ => Route::NotServed,
        }
    }

    fn parse(&self, body: &[u8]) -> Result<Request, String> {
        parse_request(&super::request::json(body)?)
    }

    fn error_response(&self, e: &ErrorInfo) -> axum::response::Response {
        json_error(e.status, &error_body(e), e.retry_after)
    }

    fn quota_error(&self) -> (u16, String, Option<&'static str>) {
        (400, "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.".to_string(), None)
    }

    fn auth_error(&self) -> (u16, String, Option<&'static str>) {
        (401, "invalid x-api-key".to_string(), Some("authentication_error"))
    }

    fn context_error(&self, tokens: u64, max_tokens: u64) -> (u16, String, Option<&'static str>) {
        (
            400,
            format!("prompt is too long: {tokens} tokens > {max_tokens} maximum"),
            None,
        )
    }

    fn models(&self, created: u64) -> Value {
        let _ = created;
        json!({
            "data": [{"type": "model", "id": "chaosrun", "display_name": "chaosrun", "created_at": "2025-01-01T00:00:00Z"}],
            "has_more": false,
            "first_id": "chaosrun",
            "last_id": "chaosrun",
        })
    }

    fn id_prefix(&self) -> &'static str {
        "msg_"
    }

    fn encoder(&self, meta: &Meta) -> Box<dyn super::Encoder> {
        Box::new(Stream::new(meta))
    }

    /// A whole non-streaming `message`.
    fn whole(&self, meta: &Meta, a: &Answer) -> Value {
        let (reason, usage) = a.finish_or_default(meta);
        let mut content = Vec::new();
        if let Some(r) = &a.reasoning {
            content.push(json!({"type": "thinking", "thinking": r, "signature": "chaosrun"}));
        }
        if !a.text.is_empty() || a.calls.is_empty() {
            content.push(json!({"type": "text", "text": a.text}));
        }
        for c in &a.calls {
            content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": args_object(&c.arguments)}));
        }
        message(
            meta,
            content,
            Some(stop_reason(&reason)),
            usage.completion_tokens,
        )
    }

    fn is_terminal(&self, kind: &str, _data: &str, _json: &Value) -> bool {
        matches!(kind, "message_delta" | "message_stop")
    }

    fn auth(&self, req: reqwest::RequestBuilder, key: &str) -> reqwest::RequestBuilder {
        req.header("x-api-key", key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_map_to_the_message_model() {
        let body = json!({
            "model": "claude", "system": [{"type": "text", "text": "sys"}], "stream": true,
            "tools": [{"name": "shell", "input_schema": {}}],
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "on it"},
                    {"type": "tool_use", "id": "t1", "name": "shell", "input": {"command": "ls"}},
                    {"type": "tool_use", "id": "t2", "name": "shell", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "a"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "b"}]},
                ]},
            ],
        });
        let r = parse_request(&body).unwrap();
        assert!(r.stream && r.has_tools);
        let roles: Vec<&str> = r.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
        assert_eq!(r.messages[2].tool_calls[0].arguments, "{\"command\":\"ls\"}");
        assert_eq!(r.messages[2].reasoning, "hmm", "thinking kept as reasoning");
        assert_eq!(r.messages[4].content, "b");
        assert_eq!(r.messages[4].tool_call_id.as_deref(), Some("t2"));
    }

    #[test]
    fn errors_are_anthropic_shaped() {
        let b = error_body(&ErrorInfo::new(529, "busy"));
        assert_eq!(b["type"], "error");
        assert_eq!(b["error"]["type"], "overloaded_error");
        assert_eq!(error_type_for(429), "rate_limit_error");
    }
}
