//! The OpenAI Chat Completions wire shapes the replies are built from:
//! `chat.completion.chunk` events for SSE (`data: {json}\n\n`, ended by
//! `data: [DONE]`), whole `chat.completion` bodies for non-streaming requests,
//! and the OpenAI-shaped error body. Pure functions over JSON; no I/O.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Value};

/// What every chunk of one completion repeats.
#[derive(Debug, Clone)]
pub(crate) struct ChunkMeta {
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// Token counts reported with the finish chunk (rough, chars / 4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Usage {
    /// Estimate from a request size in bytes and an answer length in chars.
    pub fn estimate(request_bytes: usize, answer_chars: usize) -> Usage {
        Usage {
            prompt_tokens: (request_bytes as u64).div_ceil(4),
            completion_tokens: (answer_chars as u64).div_ceil(4).max(1),
        }
    }

    pub fn to_json(self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        })
    }
}

impl ChunkMeta {
    /// One `chat.completion.chunk` with a single choice.
    pub fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        })
    }

    /// The first chunk: `{"role": "assistant", "content": ""}`.
    pub fn role(&self) -> Bytes {
        event(&self.chunk(json!({"role": "assistant", "content": ""}), None))
    }

    pub fn content(&self, text: &str) -> Bytes {
        event(&self.chunk(json!({"content": text}), None))
    }

    pub fn reasoning(&self, text: &str) -> Bytes {
        event(&self.chunk(json!({"reasoning_content": text}), None))
    }

    /// The first delta of tool call `index`: id, type, name and the first
    /// piece of the arguments.
    pub fn tool_call_start(&self, index: usize, id: &str, name: &str, arguments: &str) -> Bytes {
        let call = json!({
            "index": index,
            "id": id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        });
        event(&self.chunk(json!({"tool_calls": [call]}), None))
    }

    /// A further piece of tool call `index`'s arguments.
    pub fn tool_call_args(&self, index: usize, arguments: &str) -> Bytes {
        let call = json!({"index": index, "function": {"arguments": arguments}});
        event(&self.chunk(json!({"tool_calls": [call]}), None))
    }

    /// The finish chunk: empty delta, `finish_reason`, and `usage`.
    pub fn finish(&self, finish_reason: &str, usage: Usage) -> Bytes {
        let mut chunk = self.chunk(json!({}), Some(finish_reason));
        chunk["usage"] = usage.to_json();
        event(&chunk)
    }

    /// A whole non-streaming `chat.completion` carrying `message`.
    pub fn completion(&self, message: Value, finish_reason: &str, usage: Usage) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage.to_json(),
        })
    }
}

/// `data: {json}\n\n`.
pub(crate) fn event(value: &Value) -> Bytes {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"data: ");
    serde_json::to_writer(&mut out, value).expect("JSON values always serialise");
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// `data: [DONE]\n\n`.
pub(crate) fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

/// Split `s` into pieces of at most `n` chars (at least one char each); an
/// empty string gives no pieces.
pub(crate) fn split_chars(s: &str, n: usize) -> Vec<&str> {
    let n = n.max(1);
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut count = 0;
    for (pos, _) in s.char_indices() {
        if count == n {
            pieces.push(&s[start..pos]);
            start = pos;
            count = 0;
        }
        count += 1;
    }
    if start < s.len() {
        pieces.push(&s[start..]);
    }
    pieces
}

/// 200 with SSE headers around `body`.
pub(crate) fn sse_response(body: Body) -> Response {
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// A JSON response with `status`.
pub(crate) fn json_response(status: StatusCode, value: &Value) -> Response {
    let body = serde_json::to_vec(value).expect("JSON values always serialise");
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

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
pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let (kind, code) = error_type_for(status);
    json!({"error": {"message": message, "type": kind, "code": code}})
}

/// An OpenAI-shaped error response.
pub(crate) fn error_response(status: u16, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, &error_body(status, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> ChunkMeta {
        ChunkMeta {
            id: "chatcmpl-x".into(),
            created: 7,
            model: "m".into(),
        }
    }

    fn parse(b: &Bytes) -> Value {
        let s = std::str::from_utf8(b).unwrap();
        let payload = s
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        serde_json::from_str(payload).unwrap()
    }

    #[test]
    fn chunks_have_the_openai_shape() {
        let c = parse(&meta().content("hé"));
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["id"], "chatcmpl-x");
        assert_eq!(c["choices"][0]["delta"]["content"], "hé");
        assert!(c["choices"][0]["finish_reason"].is_null());
        let f = parse(&meta().finish("stop", Usage::estimate(8, 3)));
        assert_eq!(f["choices"][0]["finish_reason"], "stop");
        assert_eq!(f["usage"]["total_tokens"], 3);
        let t = parse(&meta().tool_call_start(2, "call_1", "shell", "{"));
        let call = &t["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["index"], 2);
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "shell");
    }

    #[test]
    fn split_chars_respects_char_boundaries() {
        assert_eq!(split_chars("héllo", 2), vec!["hé", "ll", "o"]);
        assert_eq!(split_chars("ab", 0), vec!["a", "b"]);
        assert!(split_chars("", 3).is_empty());
    }

    #[test]
    fn error_body_is_openai_shaped() {
        let b = error_body(429, "slow down");
        assert_eq!(b["error"]["message"], "slow down");
        assert_eq!(b["error"]["type"], "rate_limit_error");
        assert_eq!(b["error"]["code"], "rate_limit_exceeded");
    }
}
