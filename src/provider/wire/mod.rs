//! The wires the provider speaks, and the one event model between the reply
//! kinds and the bytes.
//!
//! A reply kind (see [`super::replies`]) decides *what* happens and *when*: a
//! [`super::replies::Plan`] of abstract [`Event`]s and waits. A wire encoder
//! (one module per wire) decides the bytes: SSE frames for a streaming request,
//! one JSON body otherwise, its own error shapes and retry-after convention,
//! its routes and model listing, and how its request body maps onto the one
//! message model the oracle reads ([`super::recording::Message`]).
//!
//! Adding a reply kind touches no wire; adding a wire is one module here
//! implementing [`WireFormat`] and its line in the `wires!` registry below.

mod render;
pub(crate) mod request;

pub(crate) use render::render;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

/// The [`Wire`] enum, its `ALL` list and [`Wire::format`] from ONE list of
/// `Variant(module::Type)` lines (each module declared here too): the only
/// place a wire is named outside its own module.
macro_rules! wires {
    ($( $(#[$doc:meta])* $variant:ident($module:ident :: $ty:ident) ),+ $(,)?) => {
        $( pub mod $module; )+

        /// A wire protocol, as named in a profile's `wire:` and
        /// `chaosrun serve --wire` (the name is its module's
        /// [`WireFormat::name`]; the first one is the default).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Wire {
            $( $(#[$doc])* $variant, )+
        }

        impl Wire {
            /// Every wire, in registry order (the order of the documentation).
            pub const ALL: [Wire; [$(stringify!($variant)),+].len()] = [$(Wire::$variant,)+];

            /// This wire's module behind the one [`WireFormat`] trait.
            pub(crate) fn format(self) -> &'static dyn WireFormat {
                match self {
                    $( Wire::$variant => &$module::$ty, )+
                }
            }
        }
    };
}

wires! {
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenaiChat(openai_chat::OpenaiChat),
    /// OpenAI Responses (`POST /v1/responses`).
    OpenaiResponses(openai_responses::OpenaiResponses),
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic(anthropic::Anthropic),
    /// Google Gemini (`POST /v1beta/models/{model}:generateContent`).
    Gemini(gemini::Gemini),
}

impl Default for Wire {
    fn default() -> Wire {
        Wire::ALL[0]
    }
}

impl serde::Serialize for Wire {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A wire name read from YAML or JSON. The name is checked inside the
/// visitor, so serde_yaml puts the scalar's `line:col` on an unknown one (an
/// error raised after the value was read carries none).
struct WireName;

impl serde::de::Visitor<'_> for WireName {
    type Value = Wire;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a wire name")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Wire, E> {
        v.parse().map_err(E::custom)
    }
}

impl<'de> serde::Deserialize<'de> for Wire {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Wire, D::Error> {
        d.deserialize_str(WireName)
    }
}

impl Wire {
    /// The name as written in a profile.
    pub fn name(self) -> &'static str {
        self.format().name()
    }

    /// The base URL a client of this wire is given, for a provider at `addr`
    /// (OpenAI clients take `/v1`; the Anthropic and Gemini SDKs add their own
    /// version segment).
    pub fn base_url(self, addr: std::net::SocketAddr) -> String {
        format!("http://{addr}{}", self.format().base_path())
    }

    /// What a request for `method path` is on this wire.
    pub(crate) fn route(self, method: &str, path: &str) -> Route {
        self.format().route(method, path)
    }

    /// This wire's error response (before any body byte), with its
    /// retry-after convention.
    pub(crate) fn error_response(self, e: &ErrorInfo) -> Response {
        self.format().error_response(&self.shape_error(e))
    }

    /// `e` with its class's status, message and code as this wire documents
    /// them (a plain error is returned as it is).
    pub(crate) fn shape_error(self, e: &ErrorInfo) -> ErrorInfo {
        let f = self.format();
        let ((status, message, code), retry_after) = match e.class {
            ErrorClass::Plain => return e.clone(),
            ErrorClass::Quota => (f.quota_error(), e.retry_after),
            ErrorClass::Auth => (f.auth_error(), e.retry_after),
            ErrorClass::ContextLength { tokens, max_tokens } => {
                (f.context_error(tokens, max_tokens), e.retry_after)
            }
            // The reset is the wire's to say: a retry-after, or only the body.
            ErrorClass::UsageLimit { resets_in_seconds } => (
                f.usage_limit_error(resets_in_seconds),
                f.usage_limit_retry_after(resets_in_seconds),
            ),
        };
        ErrorInfo {
            status,
            message,
            retry_after,
            code: code.map(String::from).or_else(|| e.code.clone()),
            class: e.class,
        }
    }

    /// The model listing body.
    pub(crate) fn models(self, created: u64) -> Value {
        self.format().models(created)
    }

    /// The id prefix of one reply.
    pub(crate) fn id_prefix(self) -> &'static str {
        self.format().id_prefix()
    }

    /// A fresh streaming encoder for one reply.
    pub(crate) fn encoder(self, meta: &Meta) -> Box<dyn Encoder> {
        self.format().encoder(meta)
    }

    /// The whole non-streaming body for `events`.
    pub(crate) fn whole(self, meta: &Meta, events: &[Event]) -> Value {
        self.format().whole(meta, &Answer::collect(events))
    }
}

/// One wire: implemented by a unit type in each wire's module, used by the
/// scripted provider (routes, request parsing, event encoding, errors) and
/// by the proxy (the upstream path and credential, the event that finishes
/// an answer) alike. Adding a wire is one module implementing this trait,
/// a [`Wire`] variant and its line in [`Wire::format`]; no reply kind changes.
pub(crate) trait WireFormat: Sync {
    /// The name as written in a profile (`wire:`) and on the command line.
    fn name(&self) -> &'static str;
    /// The version prefix a client's base URL carries (`/v1` on OpenAI's
    /// wires); an upstream's base URL carries its own.
    fn base_path(&self) -> &'static str;
    /// What a request for `method path` is.
    fn route(&self, method: &str, path: &str) -> Route;
    /// A request body in the one message model (before bounding).
    fn parse(&self, body: &[u8]) -> Result<request::Request, String>;
    /// The error response for an already shaped error.
    fn error_response(&self, e: &ErrorInfo) -> Response;
    /// Status, message and code of "quota exhausted" as the wire documents it.
    fn quota_error(&self) -> (u16, String, Option<&'static str>);
    /// Status, message and code of "the API key is not valid" (an expired
    /// or revoked credential) as the wire documents it: always a 401.
    fn auth_error(&self) -> (u16, String, Option<&'static str>);
    /// Status, message and code of "context window exceeded".
    fn context_error(&self, tokens: u64, max_tokens: u64) -> (u16, String, Option<&'static str>);
    /// Status, message and code of "the usage limit is reached until it
    /// resets in `resets` seconds" (a subscription's limit).
    fn usage_limit_error(&self, resets: u64) -> (u16, String, Option<&'static str>) {
        (
            429,
            format!("You have hit your usage limit. It resets in {resets} seconds."),
            None,
        )
    }
    /// The retry-after that error carries, in the wire's convention (the
    /// reset itself, unless the wire says it only in the body).
    fn usage_limit_retry_after(&self, resets: u64) -> Option<u64> {
        Some(resets)
    }
    /// The model listing body.
    fn models(&self, created: u64) -> Value;
    /// The id prefix of one reply.
    fn id_prefix(&self) -> &'static str;
    /// A fresh streaming encoder for one reply.
    fn encoder(&self, meta: &Meta) -> Box<dyn Encoder>;
    /// The whole non-streaming body of an answer.
    fn whole(&self, meta: &Meta, answer: &Answer) -> Value;
    /// Whether an SSE event (its `event:` name or its JSON `type`, its
    /// `data`, parsed) finishes the answer.
    fn is_terminal(&self, kind: &str, data: &str, json: &Value) -> bool;
    /// An upstream request carrying the profile's key the wire's way.
    fn auth(&self, req: reqwest::RequestBuilder, key: &str) -> reqwest::RequestBuilder;
    /// The upstream path for the agent's `path`, the version prefix already
    /// removed, with the configured model when the wire puts it in the path.
    fn upstream_path(&self, path: &str, _model: Option<&str>) -> String {
        path.to_string()
    }
    /// Whether the model is named in the request body (rewritten there when
    /// the upstream names one).
    fn model_in_body(&self) -> bool {
        true
    }
    /// Read one SSE event of an answer (its `event:` name or JSON `type`,
    /// its data parsed) into `sink` (a cassette recording an upstream).
    fn read_event(&self, kind: &str, json: &Value, sink: &mut dyn AnswerSink);
    /// Read a whole (non-streaming) answer body into `sink`.
    fn read_whole(&self, json: &Value, sink: &mut dyn AnswerSink);
    /// Whether a reply's conversation is kept so that a later request can
    /// continue it by id (Responses' `previous_response_id`).
    fn keeps_conversations(&self) -> bool {
        false
    }
    /// Whether the wire's mid-stream error event can carry a retry-after
    /// (Gemini's `RetryInfo`; the others' error frames cannot).
    fn mid_stream_retry_after(&self) -> bool {
        false
    }
}

/// What a wire's reading of one answer (an upstream's recorded stream or
/// whole body, see [`WireFormat::read_event`]) reports, in wire-neutral
/// terms; the cassette's decoder keeps it, bounded.
pub(crate) trait AnswerSink {
    /// A text chunk, or a reasoning one.
    fn text(&mut self, text: &str, reasoning: bool);
    /// A tool call under the wire's `key` (its index, its item id): its id
    /// and name when this event names them, and more of its arguments.
    fn call(&mut self, key: (usize, String), id: Option<&str>, name: Option<&str>, args: &str);
    /// The finish reason, in the wire's own words.
    fn reason(&mut self, reason: &str);
    /// Token counts, where this event reports them.
    fn usage(&mut self, input: Option<u64>, output: Option<u64>);
    /// How many tool calls were seen so far (the key of a wire whose calls
    /// carry no index).
    fn calls_seen(&self) -> usize;
}

/// A string field of a JSON object.
pub(crate) fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// A whole-number field of a JSON object.
pub(crate) fn u64_at(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// Whether any item of `list` has `key` set (a choice's `finish_reason`).
pub(crate) fn any_set(list: &Value, key: &str) -> bool {
    list.as_array()
        .is_some_and(|a| a.iter().any(|c| !c[key].is_null()))
}

impl std::fmt::Display for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Wire {
    type Err = String;
    fn from_str(s: &str) -> Result<Wire, String> {
        Wire::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Wire::ALL.iter().map(|w| w.name()).collect();
                format!("unknown wire `{s}`: expected one of {}", names.join(", "))
            })
    }
}

/// What a path is on one wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// A model call. `stream` is set when the path decides it (Gemini);
    /// `model` when the path names it.
    Generate {
        stream: Option<bool>,
        model: Option<String>,
    },
    /// The model listing.
    Models,
    /// Not served by this wire: 404.
    NotServed,
}

/// An error a reply produces, before headers or mid-stream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ErrorInfo {
    pub status: u16,
    pub message: String,
    /// Seconds, in the wire's own convention (header or body).
    pub retry_after: Option<u64>,
    /// A wire-specific error code overriding the one derived from `status`
    /// (e.g. Responses' `previous_response_not_found`).
    pub code: Option<String>,
    /// A documented failure whose status, message and body each wire shapes
    /// its own way ([`ErrorClass::Plain`] uses `status` and `message` as given).
    pub class: ErrorClass,
}

/// Provider failures each wire documents in its own shape. The wire decides
/// the status, message and body details of a non-plain class (see
/// [`Wire::shape_error`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// `status` and `message` as given.
    #[default]
    Plain,
    /// The account's quota or credit is used up: not retryable (OpenAI 429
    /// `insufficient_quota`, Anthropic 400 "credit balance is too low",
    /// Gemini 429 `RESOURCE_EXHAUSTED` with a per-day `QuotaFailure`).
    Quota,
    /// The request's credential is not (or no longer) valid: 401, not
    /// retryable with the same key (OpenAI `invalid_request_error` code
    /// `invalid_api_key`, Anthropic `authentication_error`, Gemini
    /// `UNAUTHENTICATED`).
    Auth,
    /// The request is over the model's context window (OpenAI 400
    /// `context_length_exceeded`, Anthropic 400 "prompt is too long",
    /// Gemini 400 `INVALID_ARGUMENT` input token count). `tokens` and
    /// `max_tokens` are estimates (bytes / 4).
    ContextLength { tokens: u64, max_tokens: u64 },
    /// A subscription's usage limit, reached until it resets in
    /// `resets_in_seconds`: OpenAI's wires answer the ChatGPT backend's 429
    /// `type: usage_limit_reached` with `plan_type`, `resets_in_seconds`
    /// and `resets_at` in the body and no retry-after header (what Codex
    /// reads); Anthropic a 429 `rate_limit_error` with the reset as its
    /// retry-after header; Gemini a 429 `RESOURCE_EXHAUSTED` with the reset
    /// as its `RetryInfo`. Not retryable before the reset.
    UsageLimit { resets_in_seconds: u64 },
}

impl ErrorInfo {
    pub fn new(status: u16, message: impl Into<String>) -> ErrorInfo {
        ErrorInfo {
            status,
            message: message.into(),
            retry_after: None,
            code: None,
            class: ErrorClass::Plain,
        }
    }

    /// An error of a documented class; the wire fills in status and message.
    pub fn of_class(class: ErrorClass) -> ErrorInfo {
        ErrorInfo {
            class,
            ..ErrorInfo::new(400, String::new())
        }
    }
}

/// One abstract step of an answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// The reply begins (role chunk, `message_start`, `response.created`).
    Start,
    ReasoningDelta(String),
    TextDelta(String),
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    ToolArgsDelta {
        index: usize,
        text: String,
    },
    ToolCallEnd {
        index: usize,
    },
    /// The terminal event. `reason` is in OpenAI Chat terms (`stop`,
    /// `tool_calls`, `length`, ...); each wire maps it.
    Finish {
        reason: String,
        usage: Usage,
    },
    /// An error event inside a 200 stream.
    Error(ErrorInfo),
    /// A keepalive with no content: an SSE comment (chat, Gemini), a `ping`
    /// (Anthropic), a `response.in_progress` (Responses).
    Keepalive,
}

/// Token counts reported with the finish (rough, chars / 4).
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

    pub fn total(self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// What every frame of one reply repeats.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    /// Request body size (usage estimate of a reply that has no finish yet).
    pub request_bytes: usize,
}

/// One tool call of an answer, reassembled from its events.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AnswerCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// An answer reassembled from its events (for non-streaming bodies and for
/// the Responses conversation store).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Answer {
    pub reasoning: Option<String>,
    pub text: String,
    pub calls: Vec<AnswerCall>,
    pub finish: Option<(String, Usage)>,
    pub error: Option<ErrorInfo>,
}

impl Answer {
    pub fn collect(events: &[Event]) -> Answer {
        let mut a = Answer::default();
        for ev in events {
            match ev {
                Event::Start | Event::ToolCallEnd { .. } | Event::Keepalive => {}
                Event::ReasoningDelta(t) => a.reasoning.get_or_insert_with(String::new).push_str(t),
                Event::TextDelta(t) => a.text.push_str(t),
                Event::ToolCallStart { index, id, name } => {
                    if a.calls.len() <= *index {
                        a.calls.resize(index + 1, AnswerCall::default());
                    }
                    a.calls[*index].id = id.clone();
                    a.calls[*index].name = name.clone();
                }
                Event::ToolArgsDelta { index, text } => {
                    if let Some(c) = a.calls.get_mut(*index) {
                        c.arguments.push_str(text);
                    }
                }
                Event::Finish { reason, usage } => a.finish = Some((reason.clone(), *usage)),
                Event::Error(e) => a.error = Some(e.clone()),
            }
        }
        a
    }

    /// Finish reason and usage, defaulting to `stop` and an estimate.
    pub fn finish_or_default(&self, meta: &Meta) -> (String, Usage) {
        self.finish.clone().unwrap_or_else(|| {
            let chars = self.text.chars().count();
            ("stop".into(), Usage::estimate(meta.request_bytes, chars))
        })
    }
}

/// Turns events into the SSE bytes of one wire, keeping what the wire needs
/// (open blocks, output indexes, accumulated text).
pub(crate) trait Encoder: Send {
    /// Append the frames for `ev` to `out` (possibly none).
    fn event(&mut self, ev: &Event, out: &mut Vec<u8>);
}

/// Tool arguments as a JSON object for wires whose calls carry an object
/// (Anthropic `input`, Gemini `args`): the parsed object when the string is
/// one, otherwise the string itself, verbatim, so truncated JSON stays
/// truncated on the wire.
pub(crate) fn args_object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ if arguments.trim().is_empty() => json!({}),
        _ => Value::String(arguments.to_string()),
    }
}

/// `data: {json}\n\n`.
pub(crate) fn data_frame(out: &mut Vec<u8>, value: &Value) {
    out.extend_from_slice(b"data: ");
    serde_json::to_writer(&mut *out, value).expect("JSON values always serialise");
    out.extend_from_slice(b"\n\n");
}

/// `event: KIND\ndata: {"type":"KIND", ...value}\n\n`: `type` first, as the
/// Anthropic and Responses streams put it (and so a person reads it first).
/// `value` must be an object without `type`.
pub(crate) fn typed_frame(out: &mut Vec<u8>, kind: &str, value: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\ndata: {\"type\":");
    serde_json::to_writer(&mut *out, kind).expect("strings always serialise");
    let rest = serde_json::to_vec(value).expect("JSON values always serialise");
    if rest.len() > 2 {
        out.push(b',');
        out.extend_from_slice(&rest[1..]);
    } else {
        out.push(b'}');
    }
    out.extend_from_slice(b"\n\n");
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

/// A JSON error response with `status` (500 when it is not a valid status)
/// and, when given, a `retry-after` header in seconds.
pub(crate) fn json_error(status: u16, body: &Value, retry_after: Option<u64>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(code, body);
    if let Some(secs) = retry_after {
        resp.headers_mut().insert(header::RETRY_AFTER, secs.into());
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_the_four() {
        for w in Wire::ALL {
            assert_eq!(w.name().parse::<Wire>().unwrap(), w);
            let y: Wire = serde_yaml::from_str(w.name()).unwrap();
            assert_eq!(y, w);
        }
        let e = "grpc".parse::<Wire>().unwrap_err();
        for w in Wire::ALL {
            assert!(e.contains(w.name()), "{e}");
        }
    }

    #[test]
    fn split_chars_respects_char_boundaries() {
        assert_eq!(split_chars("héllo", 2), vec!["hé", "ll", "o"]);
        assert_eq!(split_chars("ab", 0), vec!["a", "b"]);
        assert!(split_chars("", 3).is_empty());
    }

    #[test]
    fn args_object_keeps_garbage_verbatim() {
        assert_eq!(args_object("{\"a\":1}"), json!({"a": 1}));
        assert_eq!(args_object(""), json!({}));
        assert_eq!(args_object("{\"a\": \"x"), json!("{\"a\": \"x"));
        assert_eq!(args_object("[1]"), json!("[1]"));
    }

    #[test]
    fn answer_collects_calls_in_index_order() {
        let a = Answer::collect(&[
            Event::Start,
            Event::TextDelta("a".into()),
            Event::ToolCallStart {
                index: 0,
                id: "c0".into(),
                name: "t".into(),
            },
            Event::ToolArgsDelta {
                index: 0,
                text: "{\"x\"".into(),
            },
            Event::ToolArgsDelta {
                index: 0,
                text: ":1}".into(),
            },
            Event::ToolCallEnd { index: 0 },
        ]);
        assert_eq!(a.text, "a");
        assert_eq!(a.calls[0].arguments, "{\"x\":1}");
        assert!(a.finish.is_none());
    }
}
