//! OpenAI Chat Completions: `POST /v1/chat/completions` (and without `/v1`),
//! `GET /v1/models`. Streams `chat.completion.chunk` events as
//! `data: {json}\n\n` ended by `data: [DONE]`; a whole `chat.completion`
//! otherwise; errors as `{"error": {"message", "type", "code"}}` with a
//! `retry-after` header; a mid-stream error as a `data: {"error": ...}` event.

use serde::Deserialize;
use serde_json::{json, Value};

use super::request::{content_text, Request};
use crate::message::{Message, ToolCall};
use super::{str_at, u64_at, AnswerSink, data_frame, json_error, Answer, ErrorInfo, Event, Meta, Route, Usage};

/// The OpenAI error `type` and `code` conventionally used with a status.
pub(crate) fn error_type_for(status: u16) -> (&'static str, &'static str) {
    match status {
        400 => ("invalid_request_error", "invalid_request"),
        401 => ("authentication_error", "invalid_api_key"),
        403 => ("permission_error", "permission_denied"),
        404 => ("invalid_request_error", "not_found"),
        408 => ("timeout_error", "timeout"),
        429 => ("rate_limit_error", "rate_limit_exceeded"),
        500..=599 => ("server_error", "server_error"),
        _ => ("api_error", "error"),
    }
}

/// `{"error": {"message", "type", "code"}}`.
pub(crate) fn error_body(e: &ErrorInfo) -> Value {
    use super::ErrorClass;
    let (kind, code) = error_type_for(e.status);
    let code = e.code.as_deref().unwrap_or(code);
    let (kind, param) = match e.class {
        ErrorClass::UsageLimit { resets_in_seconds } => {
            // The ChatGPT backend's shape (codex-rs reads `type`,
            // `plan_type`, `resets_in_seconds` or `resets_at`).
            let now = crate::units::unix_now() as u64;
            return json!({"error": {
                "type": "usage_limit_reached",
                "message": e.message,
                "code": code,
                "plan_type": "plus",
                "resets_in_seconds": resets_in_seconds,
                "resets_at": now + resets_in_seconds,
            }});
        }
        ErrorClass::Quota => ("insufficient_quota", Value::Null),
        ErrorClass::Auth => ("invalid_request_error", Value::Null),
        ErrorClass::ContextLength { .. } => ("invalid_request_error", json!("messages")),
        ErrorClass::Plain => (kind, Value::Null),
    };
    json!({"error": {"message": e.message, "type": kind, "code": code, "param": param}})
}

pub(crate) fn error_response(e: &ErrorInfo) -> axum::response::Response {
    json_error(e.status, &error_body(e), e.retry_after)
}

fn usage_json(u: Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total(),
    })
}

/// One chat reply's streaming state: nothing beyond the meta.
pub(crate) struct Stream {
    meta: Meta,
}

impl Stream {
    pub fn new(meta: &Meta) -> Stream {
        Stream { meta: meta.clone() }
    }

    /// One `chat.completion.chunk` with a single choice.
    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.meta.id,
            "object": "chat.completion.chunk",
            "created": self.meta.created,
            "model": self.meta.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        })
    }
}

impl super::Encoder for Stream {
    fn event(&mut self, ev: &Event, out: &mut Vec<u8>) {
        let v = match ev {
            Event::Start => self.chunk(json!({"role": "assistant", "content": ""}), None),
            Event::ReasoningDelta(t) => self.chunk(json!({"reasoning_content": t}), None),
            Event::TextDelta(t) => self.chunk(json!({"content": t}), None),
            Event::ToolCallStart { index, id, name } => {
                let call = json!({
                    "index": index,
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                });
                self.chunk(json!({"tool_calls": [call]}), None)
            }
            Event::ToolArgsDelta { index, text } => {
                let call = json!({"index": index, "function": {"arguments": text}});
                self.chunk(json!({"tool_calls": [call]}), None)
            }
            Event::ToolCallEnd { .. } => return,
            Event::Keepalive => {
                out.extend_from_slice(b": keepalive\n\n");
                return;
            }
            Event::Finish { reason, usage } => {
                let mut chunk = self.chunk(json!({}), Some(reason));
                chunk["usage"] = usage_json(*usage);
                data_frame(out, &chunk);
                out.extend_from_slice(b"data: [DONE]\n\n");
                return;
            }
            Event::Error(e) => error_body(e),
        };
        data_frame(out, &v);
    }
}

// ---- request ---------------------------------------------------------------

#[derive(Deserialize)]
struct ChatRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    messages: Option<Vec<InMessage>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
}

#[derive(Deserialize)]
struct InMessage {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<InToolCall>>,
    /// DeepSeek-style `reasoning_content`, or OpenRouter-style `reasoning`.
    #[serde(default)]
    reasoning_content: Option<Value>,
    #[serde(default)]
    reasoning: Option<Value>,
}

#[derive(Deserialize)]
struct InToolCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<InFunction>,
}

#[derive(Deserialize)]
struct InFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

/// `messages` as they are: the message model is this wire's own.
pub(crate) fn parse_request(body: &[u8]) -> Result<Request, String> {
    let req: ChatRequest = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let messages = req
        .messages
        .unwrap_or_default()
        .into_iter()
        .map(|m| Message {
            tool_call_id: m.tool_call_id,
            tool_calls: m
                .tool_calls
                .unwrap_or_default()
                .into_iter()
                .map(|c| {
                    let (name, arguments) = match c.function {
                        Some(f) => (f.name, super::request::args_string(f.arguments.as_ref())),
                        None => (None, String::new()),
                    };
                    ToolCall::new(c.id.unwrap_or_default(), name.unwrap_or_default(), arguments)
                })
                .collect(),
            reasoning: content_text(m.reasoning_content.as_ref().or(m.reasoning.as_ref())),
            ..Message::new(
                m.role.as_deref().unwrap_or_default(),
                content_text(m.content.as_ref()),
            )
        })
        .collect();
    Ok(Request {
        model: req.model,
        stream: req.stream.unwrap_or(false),
        has_tools: req.tools.as_ref().is_some_and(|t| !t.is_empty()),
        tools: req
            .tools
            .as_deref()
            .map_or_else(Vec::new, super::request::offered_tools),
        messages,
        previous_response_id: None,
    })
}

/// Usage of a chunk or a whole body.
fn read_usage(v: &Value, sink: &mut dyn AnswerSink) {
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        sink.usage(u64_at(u, "prompt_tokens"), u64_at(u, "completion_tokens"));
    }
}

/// This wire behind the one [`super::WireFormat`] trait.
pub(crate) struct OpenaiChat;

impl super::WireFormat for OpenaiChat {
    /// One `chat.completion.chunk` of an upstream's answer.
    fn read_event(&self, _kind: &str, v: &Value, sink: &mut dyn AnswerSink) {
        read_usage(v, sink);
        let Some(choice) = v["choices"].get(0) else {
            return;
        };
        let d = &choice["delta"];
        let reasoning = str_at(d, "reasoning_content").or(str_at(d, "reasoning"));
        sink.text(reasoning.unwrap_or(""), true);
        sink.text(str_at(d, "content").unwrap_or(""), false);
        for tc in d["tool_calls"].as_array().into_iter().flatten() {
            let key = (u64_at(tc, "index").unwrap_or(0) as usize, String::new());
            let f = &tc["function"];
            let args = str_at(f, "arguments").unwrap_or("");
            sink.call(key, str_at(tc, "id"), str_at(f, "name"), args);
        }
        if let Some(r) = str_at(choice, "finish_reason") {
            sink.reason(r);
        }
    }

    /// A whole `chat.completion` of an upstream.
    fn read_whole(&self, v: &Value, sink: &mut dyn AnswerSink) {
        read_usage(v, sink);
        let Some(choice) = v["choices"].get(0) else {
            return;
        };
        let m = &choice["message"];
        let reasoning = str_at(m, "reasoning_content").or(str_at(m, "reasoning"));
        sink.text(reasoning.unwrap_or(""), true);
        sink.text(str_at(m, "content").unwrap_or(""), false);
        for (i, tc) in m["tool_calls"].as_array().into_iter().flatten().enumerate() {
            let f = &tc["function"];
            let name = Some(str_at(f, "name").unwrap_or_default());
            let args = str_at(f, "arguments").unwrap_or("{}");
            sink.call((i, String::new()), str_at(tc, "id"), name, args);
        }
        if let Some(r) = str_at(choice, "finish_reason") {
            sink.reason(r);
        }
    }

    fn name(&self) -> &'static str {
        "openai-chat"
    }

    fn base_path(&self) -> &'static str {
        "/v1"
    }

    fn route(&self, method: &str, path: &str) -> Route {
        match (method, path) {
            ("POST", "/v1/chat/completions" | "/chat/completions") => Route::Generate {
                stream: None,
                model: None,
            },
            ("GET", "/v1/models" | "/models") => Route::Models,
            _ => Route::NotServed,
        }
    }

    fn parse(&self, body: &[u8]) -> Result<Request, String> {
        parse_request(body)
    }

    fn error_response(&self, e: &ErrorInfo) -> axum::response::Response {
        error_response(e)
    }

    fn quota_error(&self) -> (u16, String, Option<&'static str>) {
        (
            429,
            "You exceeded your current quota, please check your plan and billing details."
                .to_string(),
            Some("insufficient_quota"),
        )
    }

    fn auth_error(&self) -> (u16, String, Option<&'static str>) {
        (
            401,
            "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys."
                .to_string(),
            Some("invalid_api_key"),
        )
    }

    /// The ChatGPT backend's usage limit (Codex's subscription wire).
    fn usage_limit_error(&self, _resets: u64) -> (u16, String, Option<&'static str>) {
        (
            429,
            "The usage limit has been reached".to_string(),
            Some("usage_limit_reached"),
        )
    }

    /// The reset is in the body only (`resets_in_seconds`).
    fn usage_limit_retry_after(&self, _resets: u64) -> Option<u64> {
        None
    }

    fn context_error(&self, tokens: u64, max_tokens: u64) -> (u16, String, Option<&'static str>) {
        (400, format!("This model's maximum context length is {max_tokens} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages."), Some("context_length_exceeded"))
    }

    fn models(&self, created: u64) -> Value {
        let _ = created;
        json!({
            "object": "list",
            "data": [{"id": "chaosrun", "object": "model", "created": created, "owned_by": "chaosrun"}],
        })
    }

    fn id_prefix(&self) -> &'static str {
        "chatcmpl-"
    }

    fn encoder(&self, meta: &Meta) -> Box<dyn super::Encoder> {
        Box::new(Stream::new(meta))
    }

    /// A whole non-streaming `chat.completion`.
    fn whole(&self, meta: &Meta, a: &Answer) -> Value {
        let (reason, usage) = a.finish_or_default(meta);
        let mut message = if a.calls.is_empty() {
            json!({"role": "assistant", "content": a.text})
        } else {
            let calls: Vec<Value> = a
                .calls
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    })
                })
                .collect();
            let content = if a.text.is_empty() {
                Value::Null
            } else {
                a.text.clone().into()
            };
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        };
        if let Some(r) = &a.reasoning {
            message["reasoning_content"] = r.clone().into();
        }
        json!({
            "id": meta.id,
            "object": "chat.completion",
            "created": meta.created,
            "model": meta.model,
            "choices": [{"index": 0, "message": message, "finish_reason": reason}],
            "usage": usage_json(usage),
        })
    }

    fn is_terminal(&self, _kind: &str, data: &str, json: &Value) -> bool {
        data.trim() == "[DONE]" || super::any_set(&json["choices"], "finish_reason")
    }

    fn auth(&self, req: reqwest::RequestBuilder, key: &str) -> reqwest::RequestBuilder {
        req.bearer_auth(key)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Encoder;
    use super::*;

    fn meta() -> Meta {
        Meta {
            id: "chatcmpl-x".into(),
            created: 7,
            model: "m".into(),
            request_bytes: 8,
        }
    }

    fn frame(ev: Event) -> Value {
        let mut out = Vec::new();
        Stream::new(&meta()).event(&ev, &mut out);
        let s = String::from_utf8(out).unwrap();
        let payload = s
            .strip_prefix("data: ")
            .unwrap()
            .split("\n\n")
            .next()
            .unwrap();
        serde_json::from_str(payload).unwrap()
    }

    #[test]
    fn reasoning_fields_are_kept_beside_the_content() {
        let body = br#"{"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "ok", "reasoning_content": "think"},
            {"role": "assistant", "content": "ok", "reasoning": "other"}
        ]}"#;
        let r = parse_request(body).unwrap();
        assert_eq!(r.messages[0].reasoning, "");
        assert_eq!(r.messages[1].reasoning, "think");
        assert_eq!(r.messages[2].reasoning, "other");
        assert_eq!(r.messages[1].content, "ok");
    }

    #[test]
    fn chunks_have_the_openai_shape() {
        let c = frame(Event::TextDelta("hé".into()));
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["id"], "chatcmpl-x");
        assert_eq!(c["choices"][0]["delta"]["content"], "hé");
        assert!(c["choices"][0]["finish_reason"].is_null());
        let f = frame(Event::Finish {
            reason: "stop".into(),
            usage: Usage::estimate(8, 3),
        });
        assert_eq!(f["choices"][0]["finish_reason"], "stop");
        assert_eq!(f["usage"]["total_tokens"], 3);
        let t = frame(Event::ToolCallStart {
            index: 2,
            id: "call_1".into(),
            name: "shell".into(),
        });
        let call = &t["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["index"], 2);
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "shell");
    }

    #[test]
    fn error_body_is_openai_shaped() {
        let b = error_body(&ErrorInfo::new(429, "slow down"));
        assert_eq!(b["error"]["message"], "slow down");
        assert_eq!(b["error"]["type"], "rate_limit_error");
        assert_eq!(b["error"]["code"], "rate_limit_exceeded");
    }

    #[test]
    fn parses_parts_and_tool_calls() {
        let body = json!({
            "model": "m",
            "stream": true,
            "tools": [{"type": "function"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "out"},
            ],
        });
        let r = parse_request(body.to_string().as_bytes()).unwrap();
        assert!(r.stream && r.has_tools);
        assert_eq!(r.messages[0].content, "a\nb");
        assert_eq!(r.messages[1].tool_calls[0].id, "c1");
        assert_eq!(r.messages[2].tool_call_id.as_deref(), Some("c1"));
    }
}
