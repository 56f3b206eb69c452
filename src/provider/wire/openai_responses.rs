//! OpenAI Responses: `POST /v1/responses` (and without `/v1`), `GET
//! /v1/models`. Streams `event: TYPE` / `data: {json}` frames
//! (`response.created`, `response.in_progress`, `response.output_item.added`,
//! `response.content_part.added`, `response.output_text.delta`,
//! `response.reasoning_summary_text.delta`,
//! `response.function_call_arguments.delta/.done`, `response.output_item.done`,
//! ended by `response.completed` / `response.incomplete`); a whole `response`
//! object otherwise. Errors are the OpenAI error object with `retry-after`
//! before headers, and `response.failed` mid-stream. Tool calls are
//! `function_call` items with `call_id`; a mapped tool name `NS/NAME` is
//! a namespaced tool (Codex offers each MCP server's tools in a `namespace`
//! tool, `mcp__SERVER`), sent as `"namespace": NS, "name": NAME` and read
//! back the same way (`/` is not allowed in a tool name, so it is free).
//!
//! History arrives as `input` items (`message`, `function_call`,
//! `function_call_output`); `instructions` is the system message;
//! `previous_response_id` continues a stored conversation (the server keeps
//! them, see `server.rs`).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::request::{args_string, content_text, offers_tools, push_call, str_field, Request};
use super::openai_chat::OpenaiChat;
use crate::message::{Message, ToolCall};
use super::{str_at, u64_at, AnswerSink, typed_frame, Answer, ErrorInfo, Event, Meta, Route, Usage};

pub(crate) fn error_response(e: &ErrorInfo) -> axum::response::Response {
    super::openai_chat::error_response(e)
}

fn usage_json(u: Usage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.total(),
    })
}

/// A `response` object with `status` and `output`.
fn response(meta: &Meta, status: &str, output: Vec<Value>) -> Value {
    json!({
        "id": meta.id,
        "object": "response",
        "created_at": meta.created,
        "status": status,
        "model": meta.model,
        "output": output,
        "error": null,
        "incomplete_details": null,
        "parallel_tool_calls": true,
        "tool_choice": "auto",
        "tools": [],
        "usage": null,
    })
}

/// Status, terminal event name and incomplete details for a finish reason.
fn terminal(reason: &str) -> (&'static str, &'static str, Value) {
    match reason {
        "length" => (
            "incomplete",
            "response.incomplete",
            json!({"reason": "max_output_tokens"}),
        ),
        "content_filter" => (
            "incomplete",
            "response.incomplete",
            json!({"reason": "content_filter"}),
        ),
        _ => ("completed", "response.completed", Value::Null),
    }
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": text}]})
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message",
        "id": id,
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    let mut item = json!({
        "type": "function_call",
        "id": id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    });
    if let Some((namespace, name)) = name.split_once('/') {
        item["namespace"] = json!(namespace);
        item["name"] = json!(name);
    }
    item
}

/// A history `function_call`'s name, `NS/NAME` when it carries a namespace.
fn call_name(item: &Value) -> String {
    let name = str_field(item, "name").unwrap_or_default();
    match str_field(item, "namespace").filter(|n| !n.is_empty()) {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    }
}

/// How much of an open item's text the stream keeps for its closing
/// `*.done` events: an endless reply (`endless_text`) must not grow the
/// server's memory; past this the `done` text is the first 1 MiB.
const KEPT_TEXT_BYTES: usize = 1 << 20;

/// Append `t` to `text` while it stays within [`KEPT_TEXT_BYTES`].
fn push_bounded(text: &mut String, t: &str) {
    if text.len() + t.len() <= KEPT_TEXT_BYTES {
        text.push_str(t);
    }
}

/// The item open in the stream.
enum Open {
    None,
    Reasoning { id: String, text: String },
    Message { id: String, text: String },
}

/// One Responses reply's streaming state.
pub(crate) struct Stream {
    meta: Meta,
    seq: u64,
    output: Vec<Value>,
    open: Open,
    /// Tool call index → (output index, item id, call id, name, arguments).
    calls: BTreeMap<usize, (usize, String, String, String, String)>,
    /// `response.created` was sent.
    started: bool,
}

impl Stream {
    pub fn new(meta: &Meta) -> Stream {
        Stream {
            meta: meta.clone(),
            seq: 0,
            output: Vec::new(),
            open: Open::None,
            calls: BTreeMap::new(),
            started: false,
        }
    }

    fn emit(&mut self, out: &mut Vec<u8>, kind: &str, mut v: Value) {
        v["sequence_number"] = self.seq.into();
        self.seq += 1;
        typed_frame(out, kind, &v);
    }

    fn item_id(&self, prefix: &str) -> String {
        format!("{prefix}_{}_{}", self.meta.id, self.output.len())
    }

    /// Close the reasoning or message item open, if any.
    fn close(&mut self, out: &mut Vec<u8>) {
        let index = self.output.len();
        match std::mem::replace(&mut self.open, Open::None) {
            Open::None => {}
            Open::Reasoning { id, text } => {
                let base = json!({"item_id": id, "output_index": index, "summary_index": 0});
                let mut done = base.clone();
                done["text"] = text.clone().into();
                self.emit(out, "response.reasoning_summary_text.done", done);
                let mut part = base;
                part["part"] = json!({"type": "summary_text", "text": text});
                self.emit(out, "response.reasoning_summary_part.done", part);
                let item = reasoning_item(&id, &text);
                self.emit(
                    out,
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                );
                self.output.push(item);
            }
            Open::Message { id, text } => {
                let base = json!({"item_id": id, "output_index": index, "content_index": 0});
                let mut done = base.clone();
                done["text"] = text.clone().into();
                self.emit(out, "response.output_text.done", done);
                let mut part = base;
                part["part"] = json!({"type": "output_text", "text": text, "annotations": []});
                self.emit(out, "response.content_part.done", part);
                let item = message_item(&id, &text, "completed");
                self.emit(
                    out,
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                );
                self.output.push(item);
            }
        }
    }
}

impl super::Encoder for Stream {
    fn event(&mut self, ev: &Event, out: &mut Vec<u8>) {
        match ev {
            Event::Start => {
                let r = response(&self.meta, "in_progress", Vec::new());
                self.emit(out, "response.created", json!({"response": r.clone()}));
                self.emit(out, "response.in_progress", json!({"response": r}));
                self.started = true;
            }
            Event::Keepalive if !self.started => self.event(&Event::Start, out),
            Event::Keepalive => {
                let r = response(&self.meta, "in_progress", self.output.clone());
                self.emit(out, "response.in_progress", json!({"response": r}));
            }
            Event::ReasoningDelta(t) => self.reasoning_delta(t, out),
            Event::TextDelta(t) => self.text_delta(t, out),
            Event::ToolCallStart {
                index: call,
                id,
                name,
            } => self.call_start(*call, id, name, out),
            Event::ToolArgsDelta { index: call, text } => self.call_args(*call, text, out),
            Event::ToolCallEnd { index: call } => self.call_end(*call, out),
            Event::Finish { reason, usage } => {
                self.close(out);
                let (status, kind, details) = terminal(reason);
                let mut r = response(&self.meta, status, self.output.clone());
                r["usage"] = usage_json(*usage);
                r["incomplete_details"] = details;
                self.emit(out, kind, json!({"response": r}));
            }
            Event::Error(e) => {
                let mut r = response(&self.meta, "failed", self.output.clone());
                let (_, code) = super::openai_chat::error_type_for(e.status);
                r["error"] =
                    json!({"code": e.code.as_deref().unwrap_or(code), "message": e.message});
                self.emit(out, "response.failed", json!({"response": r}));
            }
        }
    }
}

impl Stream {
    /// A reasoning delta (opening the reasoning item first).
    fn reasoning_delta(&mut self, t: &str, out: &mut Vec<u8>) {
        if !matches!(self.open, Open::Reasoning { .. }) {
            self.close(out);
            let id = self.item_id("rs");
            let index = self.output.len();
            let item = json!({"type": "reasoning", "id": id, "summary": []});
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            );
            self.emit(
                out,
                "response.reasoning_summary_part.added",
                json!({"item_id": id, "output_index": index, "summary_index": 0,
                       "part": {"type": "summary_text", "text": ""}}),
            );
            self.open = Open::Reasoning {
                id,
                text: String::new(),
            };
        }
        let index = self.output.len();
        if let Open::Reasoning { id, text } = &mut self.open {
            push_bounded(text, t);
            let v = json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": t});
            self.emit(out, "response.reasoning_summary_text.delta", v);
        }
    }

    /// A text delta (opening the message item first).
    fn text_delta(&mut self, t: &str, out: &mut Vec<u8>) {
        if !matches!(self.open, Open::Message { .. }) {
            self.close(out);
            let id = self.item_id("msg");
            let index = self.output.len();
            let mut item = message_item(&id, "", "in_progress");
            item["content"] = json!([]);
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            );
            self.emit(
                out,
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": []}}),
            );
            self.open = Open::Message {
                id,
                text: String::new(),
            };
        }
        let index = self.output.len();
        if let Open::Message { id, text } = &mut self.open {
            push_bounded(text, t);
            let v = json!({"item_id": id, "output_index": index, "content_index": 0,
                           "delta": t, "logprobs": []});
            self.emit(out, "response.output_text.delta", v);
        }
    }

    /// A function call item opens.
    fn call_start(&mut self, call: usize, id: &str, name: &str, out: &mut Vec<u8>) {
        self.close(out);
        let index = self.output.len() + self.calls.len();
        let item_id = format!("fc_{}_{index}", self.meta.id);
        let item = call_item(&item_id, id, name, "", "in_progress");
        self.emit(
            out,
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        );
        self.calls.insert(
            call,
            (
                index,
                item_id,
                id.to_string(),
                name.to_string(),
                String::new(),
            ),
        );
    }

    /// A piece of a call's arguments.
    fn call_args(&mut self, call: usize, text: &str, out: &mut Vec<u8>) {
        let Some((index, item_id, ..)) = self.calls.get(&call) else {
            return;
        };
        let v = json!({"item_id": item_id, "output_index": index, "delta": text});
        if let Some(c) = self.calls.get_mut(&call) {
            c.4.push_str(text);
        }
        self.emit(out, "response.function_call_arguments.delta", v);
    }

    /// A call's arguments are complete: its item is done.
    fn call_end(&mut self, call: usize, out: &mut Vec<u8>) {
        let Some((index, item_id, call_id, name, args)) = self.calls.remove(&call) else {
            return;
        };
        self.emit(
            out,
            "response.function_call_arguments.done",
            json!({"item_id": item_id, "output_index": index, "arguments": args}),
        );
        let item = call_item(&item_id, &call_id, &name, &args, "completed");
        self.emit(
            out,
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.output.push(item);
    }
}

// ---- request ---------------------------------------------------------------

fn role_of(role: &str) -> &str {
    match role {
        "developer" => "system",
        other => other,
    }
}

/// `instructions` as the system message, then `input` (a string, or items).
pub(crate) fn parse_request(v: &Value) -> Result<Request, String> {
    let mut messages = Vec::new();
    if let Some(text) = v.get("instructions").and_then(Value::as_str) {
        messages.push(Message::new("system", text));
    }
    match v.get("input") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(Message::new("user", s.clone())),
        Some(Value::Array(items)) => {
            let mut pending = String::new();
            for item in items {
                input_item(item, &mut messages, &mut pending)?;
            }
            if !pending.is_empty() {
                attach_reasoning(&mut messages, &mut pending, true);
            }
        }
        Some(_) => return Err("`input` must be a string or an array of items".into()),
    }
    Ok(Request {
        model: str_field(v, "model"),
        stream: v.get("stream").and_then(Value::as_bool).unwrap_or(false),
        has_tools: offers_tools(v),
        tools: super::request::offered_in(v),
        messages,
        previous_response_id: str_field(v, "previous_response_id"),
    })
}

/// The text of a `reasoning` item: its summary parts and content parts.
fn reasoning_text(item: &Value) -> String {
    [item.get("summary"), item.get("content")]
        .into_iter()
        .map(content_text)
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Give `pending` reasoning to the assistant message it preceded (the last
/// one), or, at the end of the input or before a non-assistant item, to the
/// last assistant message or a message of its own.
fn attach_reasoning(messages: &mut Vec<Message>, pending: &mut String, own_if_none: bool) {
    let text = std::mem::take(pending);
    match messages.last_mut() {
        Some(m) if m.role == "assistant" => {
            if !m.reasoning.is_empty() {
                m.reasoning.push('\n');
            }
            m.reasoning.push_str(&text);
        }
        _ if own_if_none => messages.push(Message {
            role: "assistant".into(),
            reasoning: text,
            ..Message::default()
        }),
        _ => *pending = text,
    }
}

fn input_item(item: &Value, messages: &mut Vec<Message>, pending: &mut String) -> Result<(), String> {
    if !item.is_object() {
        return Err("every `input` item must be an object".into());
    }
    let kind = item.get("type").and_then(Value::as_str);
    let role = item.get("role").and_then(Value::as_str);
    // Reasoning precedes the output it led to: held until that item comes.
    if kind == Some("reasoning") {
        let t = reasoning_text(item);
        if !t.is_empty() {
            if !pending.is_empty() {
                pending.push('\n');
            }
            pending.push_str(&t);
        }
        return Ok(());
    }
    let assistant_item = kind == Some("function_call") || role.map(role_of) == Some("assistant");
    if !pending.is_empty() && !assistant_item {
        attach_reasoning(messages, pending, true);
    }
    match kind {
        Some("function_call") => push_call(
            messages,
            ToolCall::new(
                str_field(item, "call_id").unwrap_or_default(),
                call_name(item),
                args_string(item.get("arguments")),
            ),
        ),
        Some("function_call_output") => messages.push(Message::tool_result(
            str_field(item, "call_id").unwrap_or_default(),
            content_text(item.get("output")),
        )),
        Some("message") | None if item.get("role").is_some() => {
            let role = item.get("role").and_then(Value::as_str).unwrap_or_default();
            messages.push(Message::new(role_of(role), content_text(item.get("content"))));
        }
        // Other items carry no message of the model.
        _ => {}
    }
    if !pending.is_empty() && assistant_item {
        attach_reasoning(messages, pending, true);
    }
    Ok(())
}

/// Usage of a response object.
fn read_usage(r: &Value, sink: &mut dyn AnswerSink) {
    if let Some(u) = r.get("usage").filter(|u| u.is_object()) {
        sink.usage(u64_at(u, "input_tokens"), u64_at(u, "output_tokens"));
    }
}

/// A finished output item: a function call is kept whole.
fn read_item(i: usize, item: &Value, sink: &mut dyn AnswerSink) {
    if str_at(item, "type") == Some("function_call") {
        let key = (i, str_at(item, "id").unwrap_or_default().to_string());
        let id = str_at(item, "call_id").or(str_at(item, "id"));
        let name = Some(str_at(item, "name").unwrap_or_default());
        sink.call(key, id, name, str_at(item, "arguments").unwrap_or("{}"));
    }
}

/// This wire behind the one [`super::WireFormat`] trait.
pub(crate) struct OpenaiResponses;

impl super::WireFormat for OpenaiResponses {
    /// One event of an upstream's Responses stream.
    fn read_event(&self, kind: &str, v: &Value, sink: &mut dyn AnswerSink) {
        match kind {
            "response.output_text.delta" => sink.text(str_at(v, "delta").unwrap_or(""), false),
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                sink.text(str_at(v, "delta").unwrap_or(""), true)
            }
            "response.output_item.done" => {
                let i = u64_at(v, "output_index").unwrap_or(0) as usize;
                read_item(i, &v["item"], sink);
            }
            "response.completed" => {
                read_usage(&v["response"], sink);
                sink.reason("stop");
            }
            "response.incomplete" => {
                read_usage(&v["response"], sink);
                sink.reason("length");
            }
            _ => {}
        }
    }

    /// A whole response object of an upstream.
    fn read_whole(&self, v: &Value, sink: &mut dyn AnswerSink) {
        read_usage(v, sink);
        for (i, item) in v["output"].as_array().into_iter().flatten().enumerate() {
            match str_at(item, "type") {
                Some("message") => {
                    for part in item["content"].as_array().into_iter().flatten() {
                        sink.text(str_at(part, "text").unwrap_or(""), false);
                    }
                }
                Some("reasoning") => {
                    for part in item["summary"].as_array().into_iter().flatten() {
                        sink.text(str_at(part, "text").unwrap_or(""), true);
                    }
                }
                _ => read_item(i, item, sink),
            }
        }
        let incomplete = str_at(v, "status") == Some("incomplete");
        sink.reason(if incomplete { "length" } else { "stop" });
    }

    fn keeps_conversations(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "openai-responses"
    }

    fn base_path(&self) -> &'static str {
        "/v1"
    }

    fn route(&self, method: &str, path: &str) -> Route {
        match (method, path) {
            ("POST", "/v1/responses" | "/responses") => Route::Generate {
                stream: None,
                model: None,
            },
            ("GET", "/v1/models" | "/models") => Route::Models,
            _ => Route::NotServed,
        }
    }

    fn parse(&self, body: &[u8]) -> Result<Request, String> {
        parse_request(&super::request::json(body)?)
    }

    fn error_response(&self, e: &ErrorInfo) -> axum::response::Response {
        error_response(e)
    }

    /// OpenAI's account-level error, as on Chat Completions.
    fn quota_error(&self) -> (u16, String, Option<&'static str>) {
        OpenaiChat.quota_error()
    }

    fn auth_error(&self) -> (u16, String, Option<&'static str>) {
        OpenaiChat.auth_error()
    }

    /// The ChatGPT backend's usage limit, as on Chat Completions.
    fn usage_limit_error(&self, resets: u64) -> (u16, String, Option<&'static str>) {
        OpenaiChat.usage_limit_error(resets)
    }

    fn usage_limit_retry_after(&self, resets: u64) -> Option<u64> {
        OpenaiChat.usage_limit_retry_after(resets)
    }

    /// OpenAI's context-window error, as on Chat Completions.
    fn context_error(&self, tokens: u64, max_tokens: u64) -> (u16, String, Option<&'static str>) {
        OpenaiChat.context_error(tokens, max_tokens)
    }

    /// OpenAI's model listing, as on Chat Completions.
    fn models(&self, created: u64) -> Value {
        OpenaiChat.models(created)
    }

    fn id_prefix(&self) -> &'static str {
        "resp_"
    }

    fn encoder(&self, meta: &Meta) -> Box<dyn super::Encoder> {
        Box::new(Stream::new(meta))
    }

    /// A whole non-streaming `response`.
    fn whole(&self, meta: &Meta, a: &Answer) -> Value {
        let (reason, usage) = a.finish_or_default(meta);
        let mut output = Vec::new();
        if let Some(r) = &a.reasoning {
            output.push(reasoning_item(&format!("rs_{}_0", meta.id), r));
        }
        if !a.text.is_empty() || a.calls.is_empty() {
            let id = format!("msg_{}_{}", meta.id, output.len());
            output.push(message_item(&id, &a.text, "completed"));
        }
        for c in &a.calls {
            let id = format!("fc_{}_{}", meta.id, output.len());
            output.push(call_item(&id, &c.id, &c.name, &c.arguments, "completed"));
        }
        let (status, _, details) = terminal(&reason);
        let mut r = response(meta, status, output);
        r["usage"] = usage_json(usage);
        r["incomplete_details"] = details;
        r
    }

    fn is_terminal(&self, kind: &str, _data: &str, _json: &Value) -> bool {
        matches!(
            kind,
            "response.completed" | "response.incomplete" | "response.failed"
        )
    }

    fn auth(&self, req: reqwest::RequestBuilder, key: &str) -> reqwest::RequestBuilder {
        req.bearer_auth(key)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Encoder;
    use super::*;

    #[test]
    fn input_items_map_to_the_message_model() {
        let body = json!({
            "model": "m", "instructions": "be brief", "stream": true,
            "tools": [{"type": "function", "name": "shell"}],
            "previous_response_id": "resp_1",
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "on it"}]},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}]},
                {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "shell", "arguments": "{}"},
                {"type": "reasoning", "summary": []},
                {"type": "function_call_output", "call_id": "c1", "output": "a"},
                {"type": "function_call_output", "call_id": "c2", "output": "b"},
            ],
        });
        let r = parse_request(&body).unwrap();
        assert!(r.stream && r.has_tools);
        assert_eq!(r.previous_response_id.as_deref(), Some("resp_1"));
        let roles: Vec<&str> = r.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
        assert_eq!(r.messages[2].content, "on it");
        assert_eq!(r.messages[2].tool_calls.len(), 2);
        assert_eq!(
            r.messages[2].reasoning, "plan",
            "reasoning joins the turn it preceded"
        );
        assert_eq!(r.messages[4].tool_call_id.as_deref(), Some("c2"));
    }

    #[test]
    fn stream_ends_with_completed_carrying_the_output() {
        let meta = Meta {
            id: "resp_x".into(),
            created: 1,
            model: "m".into(),
            request_bytes: 4,
        };
        let mut s = Stream::new(&meta);
        let mut out = Vec::new();
        for ev in [
            Event::Start,
            Event::TextDelta("he".into()),
            Event::TextDelta("y".into()),
            Event::ToolCallStart {
                index: 0,
                id: "c".into(),
                name: "t".into(),
            },
            Event::ToolArgsDelta {
                index: 0,
                text: "{}".into(),
            },
            Event::ToolCallEnd { index: 0 },
            Event::Finish {
                reason: "tool_calls".into(),
                usage: Usage::default(),
            },
        ] {
            s.event(&ev, &mut out);
        }
        let text = String::from_utf8(out).unwrap();
        let last = text.trim_end().rsplit("\n\n").next().unwrap();
        assert!(last.starts_with("event: response.completed\n"), "{last}");
        let data: Value = serde_json::from_str(last.split_once("data: ").unwrap().1).unwrap();
        let output = data["response"]["output"].as_array().unwrap();
        assert_eq!(output[0]["content"][0]["text"], "hey");
        assert_eq!(output[1]["call_id"], "c");
        assert_eq!(output[1]["arguments"], "{}");
    }

    #[test]
    fn a_namespaced_tool_name_goes_out_and_comes_back_split() {
        let item = call_item("fc_1", "c1", "mcp__chaos/probe", "{}", "completed");
        assert_eq!(
            (&item["namespace"], &item["name"]),
            (&json!("mcp__chaos"), &json!("probe"))
        );
        let plain = call_item("fc_2", "c2", "shell", "{}", "completed");
        assert!(plain.get("namespace").is_none(), "{plain}");
        let r = parse_request(&json!({
            "input": [{"type": "function_call", "call_id": "c1", "namespace": "mcp__chaos",
                       "name": "probe", "arguments": "{}"}],
        }))
        .unwrap();
        let text = format!("{:?}", r.messages);
        assert!(text.contains("mcp__chaos/probe"), "{text}");
    }
}
