//! Google Gemini: `POST /v1beta/models/{model}:generateContent` (one JSON
//! `GenerateContentResponse`) and `:streamGenerateContent?alt=sse` (SSE
//! `data:` frames, each a `GenerateContentResponse`; the last one carries
//! `finishReason` and `usageMetadata`), `GET /v1beta/models`. Errors are
//! `{"error": {"code", "message", "status"}}` (`RESOURCE_EXHAUSTED` 429,
//! `UNAVAILABLE` 503, ...) with retry-after as a `google.rpc.RetryInfo`
//! detail, and the same object as a `data:` frame mid-stream. Tool calls are
//! whole `functionCall` parts (with an `id`); the Gemini wire does not stream
//! arguments.
//!
//! Requests: `systemInstruction` and `contents` of `parts` (`text`,
//! `functionCall`, `functionResponse`); a call or response with no `id` is
//! paired by name and position (`NAME#k`).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::request::{content_text, offers_tools, Request};
use crate::message::{Message, ToolCall};
use super::{str_at, u64_at, AnswerSink, args_object, data_frame, json_error, Answer, ErrorInfo, Event, Meta, Route, Usage};

pub(crate) fn route(method: &str, path: &str) -> Route {
    if method == "GET" && matches!(path, "/v1beta/models" | "/v1/models") {
        return Route::Models;
    }
    let rest = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"));
    let Some((model, action)) = rest.and_then(|r| r.rsplit_once(':')) else {
        return Route::NotServed;
    };
    let stream = match (method, action) {
        ("POST", "generateContent") => false,
        ("POST", "streamGenerateContent") => true,
        _ => return Route::NotServed,
    };
    Route::Generate {
        stream: Some(stream),
        model: Some(model.to_string()),
    }
}

/// Google's canonical status name for an HTTP status.
pub(crate) fn status_name(status: u16) -> &'static str {
    match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        500 => "INTERNAL",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "UNKNOWN",
    }
}

fn error_body(e: &ErrorInfo) -> Value {
    let status = e.code.as_deref().unwrap_or(status_name(e.status));
    let mut err = json!({"code": e.status, "message": e.message, "status": status});
    let mut details = Vec::new();
    if e.class == super::ErrorClass::Quota {
        // A per-day quota, as the Gemini API reports a free tier used up.
        details.push(json!({
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [{
                "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                "quotaDimensions": {"location": "global", "model": "chaosrun"},
                "quotaValue": "250",
            }],
        }));
        details.push(json!({
            "@type": "type.googleapis.com/google.rpc.Help",
            "links": [{"description": "Learn more about Gemini API quotas",
                       "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}],
        }));
    }
    if let Some(secs) = e.retry_after {
        details.push(json!({
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": format!("{secs}s"),
        }));
    }
    if !details.is_empty() {
        err["details"] = Value::Array(details);
    }
    json!({ "error": err })
}

fn finish_reason(reason: &str) -> String {
    match reason {
        "stop" | "tool_calls" => "STOP".into(),
        "length" => "MAX_TOKENS".into(),
        "content_filter" => "SAFETY".into(),
        other => other.to_ascii_uppercase(),
    }
}

fn usage_json(u: Usage) -> Value {
    json!({
        "promptTokenCount": u.prompt_tokens,
        "candidatesTokenCount": u.completion_tokens,
        "totalTokenCount": u.total(),
    })
}

fn chunk(meta: &Meta, parts: Vec<Value>) -> Value {
    json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
        "modelVersion": meta.model,
        "responseId": meta.id,
    })
}

fn call_part(id: &str, name: &str, arguments: &str) -> Value {
    json!({"functionCall": {"id": id, "name": name, "args": args_object(arguments)}})
}

/// One Gemini reply's streaming state: tool calls are sent whole at their end.
pub(crate) struct Stream {
    meta: Meta,
    calls: BTreeMap<usize, (String, String, String)>,
}

impl Stream {
    pub fn new(meta: &Meta) -> Stream {
        Stream {
            meta: meta.clone(),
            calls: BTreeMap::new(),
        }
    }
}

impl super::Encoder for Stream {
    fn event(&mut self, ev: &Event, out: &mut Vec<u8>) {
        let v = match ev {
            Event::Start => return,
            Event::ReasoningDelta(t) => {
                chunk(&self.meta, vec![json!({"text": t, "thought": true})])
            }
            Event::TextDelta(t) => chunk(&self.meta, vec![json!({"text": t})]),
            Event::ToolCallStart { index, id, name } => {
                self.calls
                    .insert(*index, (id.clone(), name.clone(), String::new()));
                return;
            }
            Event::ToolArgsDelta { index, text } => {
                if let Some(c) = self.calls.get_mut(index) {
                    c.2.push_str(text);
                }
                return;
            }
            Event::ToolCallEnd { index } => {
                let Some((id, name, args)) = self.calls.remove(index) else {
                    return;
                };
                chunk(&self.meta, vec![call_part(&id, &name, &args)])
            }
            Event::Finish { reason, usage } => {
                let mut c = chunk(&self.meta, vec![json!({"text": ""})]);
                c["candidates"][0]["finishReason"] = finish_reason(reason).into();
                c["usageMetadata"] = usage_json(*usage);
                c
            }
            Event::Error(e) => error_body(e),
            Event::Keepalive => {
                out.extend_from_slice(b": keepalive\n\n");
                return;
            }
        };
        data_frame(out, &v);
    }
}

// ---- request ---------------------------------------------------------------

pub(crate) fn parse_request(v: &Value) -> Result<Request, String> {
    let mut messages = Vec::new();
    match v
        .get("systemInstruction")
        .or_else(|| v.get("system_instruction"))
    {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(Message::new("system", s.clone())),
        Some(c @ Value::Object(_)) => messages.push(Message::new("system", parts_text(c))),
        Some(_) => return Err("`systemInstruction` must be a Content object".into()),
    }
    match v.get("contents") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for c in list {
                content_in(c, &mut messages)?;
            }
        }
        Some(_) => return Err("`contents` must be an array".into()),
    }
    Ok(Request {
        model: None,
        stream: false,
        has_tools: offers_tools(v),
        tools: super::request::offered_in(v),
        messages,
        previous_response_id: None,
    })
}

/// The text parts (not thoughts) of a Content, joined.
fn parts_text(c: &Value) -> String {
    c.get("parts")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn content_in(c: &Value, messages: &mut Vec<Message>) -> Result<(), String> {
    if !c.is_object() {
        return Err("every `contents` entry must be an object".into());
    }
    let parts: &[Value] = match c.get("parts") {
        Some(Value::Array(p)) => p,
        None | Some(Value::Null) => &[],
        Some(_) => return Err("`parts` must be an array".into()),
    };
    let role = match c.get("role").and_then(Value::as_str) {
        Some("model") => "assistant",
        _ => "user",
    };
    // Position of an id-less call or response among those of its name.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut id_of = |part: &Value, name: &str| match part.get("id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => {
            let k = seen.entry(name.to_string()).or_default();
            *k += 1;
            format!("{name}#{}", *k - 1)
        }
    };
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for p in parts {
        if let Some(fc) = p.get("functionCall") {
            let name = fc.get("name").and_then(Value::as_str).unwrap_or_default();
            let args = super::request::args_string(fc.get("args"));
            calls.push(ToolCall::new(id_of(fc, name), name, args));
        } else if let Some(fr) = p.get("functionResponse") {
            let name = fr.get("name").and_then(Value::as_str).unwrap_or_default();
            let response = fr.get("response");
            let text = match response.and_then(|r| r.get("output").or_else(|| r.get("result"))) {
                Some(Value::String(s)) => s.clone(),
                _ => content_text(response),
            };
            results.push(Message::tool_result(id_of(fr, name), text));
        }
    }
    let text = parts_text(c);
    let thoughts = parts
        .iter()
        .filter(|p| p.get("thought").and_then(Value::as_bool) == Some(true))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    let has_results = !results.is_empty();
    messages.extend(results);
    if !text.is_empty() || !calls.is_empty() || !thoughts.is_empty() || !has_results {
        messages.push(Message {
            tool_calls: calls,
            reasoning: thoughts,
            ..Message::new(role, text)
        });
    }
    Ok(())
}

/// `models/NAME:method` with NAME replaced.
fn with_model(path: &str, model: &str) -> String {
    let Some(start) = path.find("/models/").map(|i| i + "/models/".len()) else {
        return path.to_string();
    };
    let end = path[start..].find(':').map_or(path.len(), |i| start + i);
    format!("{}{model}{}", &path[..start], &path[end..])
}

/// One `GenerateContentResponse` of an upstream (a stream chunk or a whole
/// body's element).
fn read_event(_kind: &str, v: &Value, sink: &mut dyn AnswerSink) {
    if let Some(u) = v.get("usageMetadata") {
        sink.usage(
            u64_at(u, "promptTokenCount"),
            u64_at(u, "candidatesTokenCount"),
        );
    }
    let Some(c) = v["candidates"].get(0) else {
        return;
    };
    for part in c["content"]["parts"].as_array().into_iter().flatten() {
        if let Some(t) = str_at(part, "text") {
            sink.text(t, part["thought"].as_bool() == Some(true));
        }
        if let Some(f) = part.get("functionCall") {
            let key = (sink.calls_seen(), String::new());
            let args = f.get("args").map_or("{}".to_string(), Value::to_string);
            let name = Some(str_at(f, "name").unwrap_or_default());
            sink.call(key, str_at(f, "id"), name, &args);
        }
    }
    if let Some(r) = str_at(c, "finishReason") {
        sink.reason(r);
    }
}

/// This wire behind the one [`super::WireFormat`] trait.
pub(crate) struct Gemini;

impl super::WireFormat for Gemini {
    fn read_event(&self, kind: &str, json: &Value, sink: &mut dyn super::AnswerSink) {
        read_event(kind, json, sink)
    }

    /// A whole body of an upstream: one response, or a list of them.
    fn read_whole(&self, v: &Value, sink: &mut dyn AnswerSink) {
        match v.as_array() {
            Some(list) => list.iter().for_each(|c| read_event("", c, sink)),
            None => read_event("", v, sink),
        }
    }

    fn mid_stream_retry_after(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "gemini"
    }

    fn base_path(&self) -> &'static str {
        ""
    }

    fn route(&self, method: &str, path: &str) -> Route {
        route(method, path)
    }

    fn parse(&self, body: &[u8]) -> Result<Request, String> {
        parse_request(&super::request::json(body)?)
    }

    /// Retry-after travels in the body (`RetryInfo`), not in a header.
    fn error_response(&self, e: &ErrorInfo) -> axum::response::Response {
        json_error(e.status, &error_body(e), None)
    }

    fn quota_error(&self) -> (u16, String, Option<&'static str>) {
        (
            429,
            "You exceeded your current quota, please check your plan and billing details."
                .to_string(),
            None,
        )
    }

    fn auth_error(&self) -> (u16, String, Option<&'static str>) {
        (
            401,
            "API key not valid. Please pass a valid API key.".to_string(),
            Some("UNAUTHENTICATED"),
        )
    }

    fn context_error(&self, tokens: u64, max_tokens: u64) -> (u16, String, Option<&'static str>) {
        (400, format!("The input token count ({tokens}) exceeds the maximum number of tokens allowed ({max_tokens})."), None)
    }

    fn models(&self, created: u64) -> Value {
        let _ = created;
        json!({
            "models": [{
                "name": "models/chaosrun",
                "displayName": "chaosrun",
                "inputTokenLimit": 1_000_000,
                "outputTokenLimit": 65_536,
                "supportedGenerationMethods": ["generateContent", "streamGenerateContent"],
            }],
        })
    }

    fn id_prefix(&self) -> &'static str {
        "gem_"
    }

    fn encoder(&self, meta: &Meta) -> Box<dyn super::Encoder> {
        Box::new(Stream::new(meta))
    }

    /// A whole non-streaming `GenerateContentResponse`.
    fn whole(&self, meta: &Meta, a: &Answer) -> Value {
        let (reason, usage) = a.finish_or_default(meta);
        let mut parts = Vec::new();
        if let Some(r) = &a.reasoning {
            parts.push(json!({"text": r, "thought": true}));
        }
        if !a.text.is_empty() || a.calls.is_empty() {
            parts.push(json!({"text": a.text}));
        }
        for c in &a.calls {
            parts.push(call_part(&c.id, &c.name, &c.arguments));
        }
        let mut v = chunk(meta, parts);
        v["candidates"][0]["finishReason"] = finish_reason(&reason).into();
        v["usageMetadata"] = usage_json(usage);
        v
    }

    fn is_terminal(&self, _kind: &str, _data: &str, json: &Value) -> bool {
        super::any_set(&json["candidates"], "finishReason")
    }

    fn auth(&self, req: reqwest::RequestBuilder, key: &str) -> reqwest::RequestBuilder {
        req.header("x-goog-api-key", key)
    }

    fn upstream_path(&self, path: &str, model: Option<&str>) -> String {
        match model {
            Some(m) => with_model(path, m),
            None => path.to_string(),
        }
    }

    fn model_in_body(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_take_model_and_stream_from_the_path() {
        assert_eq!(
            route(
                "POST",
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
            ),
            Route::Generate {
                stream: Some(true),
                model: Some("gemini-2.5-flash".into())
            }
        );
        assert_eq!(route("GET", "/v1beta/models"), Route::Models);
        assert_eq!(route("POST", "/v1/chat/completions"), Route::NotServed);
        assert_eq!(route("POST", "/v1beta/models/m:embed"), Route::NotServed);
    }

    #[test]
    fn parts_map_to_the_message_model_and_pair_without_ids() {
        let body = json!({
            "systemInstruction": {"parts": [{"text": "sys"}]},
            "tools": [{"functionDeclarations": [{"name": "shell"}]}],
            "contents": [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [
                    {"text": "hmm", "thought": true},
                    {"functionCall": {"id": "c1", "name": "shell", "args": {"command": "ls"}}},
                    {"functionCall": {"name": "shell", "args": {}}},
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"id": "c1", "name": "shell", "response": {"output": "a"}}},
                    {"functionResponse": {"name": "shell", "response": {"output": "b"}}},
                ]},
            ],
        });
        let r = parse_request(&body).unwrap();
        assert!(r.has_tools);
        let roles: Vec<&str> = r.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
        assert_eq!(r.messages[2].content, "");
        assert_eq!(
            r.messages[2].reasoning, "hmm",
            "thought parts kept as reasoning"
        );
        assert_eq!(r.messages[2].tool_calls[1].id, "shell#0");
        assert_eq!(r.messages[3].content, "a");
        assert_eq!(r.messages[4].tool_call_id.as_deref(), Some("shell#0"));
    }

    #[test]
    fn errors_are_google_shaped_with_retry_info() {
        let mut e = ErrorInfo::new(429, "quota");
        e.retry_after = Some(2);
        let b = error_body(&e);
        assert_eq!(b["error"]["status"], "RESOURCE_EXHAUSTED");
        assert_eq!(b["error"]["code"], 429);
        assert_eq!(b["error"]["details"][0]["retryDelay"], "2s");
        assert_eq!(status_name(503), "UNAVAILABLE");
    }
}
