//! The axum server behind [`super::Provider`]: routes, request classification
//! (probe / main / auxiliary), rule selection and `wait_for`, recording, and a
//! shutdown that cuts every long wait at once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::Router;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::recording::{
    BodyHash, CallKind, IssuedToolCall, Recorder, Recording, RequestRecord, WaitOutcome,
    WireMessage, WireToolCall, CONTENT_KEEP_CHARS, HEADERS_KEEP_BYTES,
};
use super::replies::{secs, wait_or_cancel, Reply, ReplyCtx, Text};
use super::rules::{self, Rule, WaitFor};
use super::sse::{self, ChunkMeta};
use super::{ProcessCounter, ProviderConfig, ToolMapping};

use super::RequestObserver as Observer;

/// Largest request body held and parsed (an agent may send a 30 MB tool
/// output); a longer one is drained, counted and hashed as it arrives, never
/// held, and refused with 413.
pub(crate) const BODY_LIMIT: usize = 64 * 1024 * 1024;
/// How often a `wait_for` rule re-counts processes.
const WAIT_FOR_POLL: Duration = Duration::from_millis(50);
/// How long `shutdown` lets connections close by themselves before aborting.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// A serving provider.
pub(crate) struct Running {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

struct Shared {
    rules: Vec<Rule>,
    nonce: String,
    tools: BTreeMap<String, ToolMapping>,
    process_counter: Option<ProcessCounter>,
    observer: Option<Observer>,
    started: Instant,
    /// Random-ish per server, so ids differ between providers.
    prefix: String,
    seq: AtomicU64,
    reply_seq: AtomicU64,
    main: AtomicU64,
    probe: AtomicU64,
    aux: AtomicU64,
    main_tx: watch::Sender<u64>,
    records: Mutex<Recorder>,
    issued: Mutex<Vec<IssuedToolCall>>,
    waits: Mutex<Vec<WaitOutcome>>,
    /// Main calls answered by each responder rule (exact, like the counters).
    rule_hits: Vec<AtomicU64>,
    cancel: CancellationToken,
}

/// `wait_for` outcomes kept per provider (the first ones; the rest dropped).
const WAITS_KEEP: usize = 256;

impl Running {
    pub(crate) async fn start(config: ProviderConfig) -> anyhow::Result<Running> {
        Running::start_observed(config, None).await
    }

    pub(crate) async fn start_observed(
        config: ProviderConfig,
        observer: Option<Observer>,
    ) -> anyhow::Result<Running> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", config.port))
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot bind 127.0.0.1:{}: {e} (pick another --port, or 0 for any free one)",
                    config.port
                )
            })?;
        let addr = listener.local_addr()?;
        let (main_tx, _) = watch::channel(0u64);
        let rule_hits = config.rules.iter().map(|_| AtomicU64::new(0)).collect();
        let shared = Arc::new(Shared {
            rules: config.rules,
            nonce: config.nonce,
            tools: config.tools,
            process_counter: config.process_counter,
            observer,
            started: Instant::now(),
            prefix: format!("{:06x}", rand::random::<u32>() & 0xff_ffff),
            seq: AtomicU64::new(0),
            reply_seq: AtomicU64::new(0),
            main: AtomicU64::new(0),
            probe: AtomicU64::new(0),
            aux: AtomicU64::new(0),
            main_tx,
            records: Mutex::new(Recorder::new(config.record)),
            issued: Mutex::new(Vec::new()),
            waits: Mutex::new(Vec::new()),
            rule_hits,
            cancel: CancellationToken::new(),
        });
        let app = router(shared.clone());
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let cancel = shared.cancel.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { cancel.cancelled().await })
                .await;
        });
        Ok(Running {
            addr,
            shared,
            task: Some(task),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn main_calls(&self) -> watch::Receiver<u64> {
        self.shared.main_tx.subscribe()
    }

    pub(crate) fn recording(&self) -> Recording {
        let (requests, requests_dropped) = self.shared.records.lock().unwrap().snapshot();
        Recording {
            requests,
            requests_dropped,
            issued_tool_calls: self.shared.issued.lock().unwrap().clone(),
            waits: self.shared.waits.lock().unwrap().clone(),
            rule_hits: self
                .shared
                .rule_hits
                .iter()
                .map(|n| n.load(Ordering::SeqCst))
                .collect(),
            main_calls: self.shared.main.load(Ordering::SeqCst),
            probe_calls: self.shared.probe.load(Ordering::SeqCst),
            aux_calls: self.shared.aux.load(Ordering::SeqCst),
        }
    }

    /// Total requests received (every route).
    pub(crate) fn request_count(&self) -> u64 {
        self.shared.seq.load(Ordering::SeqCst)
    }

    pub(crate) async fn shutdown(mut self) -> Recording {
        self.shared.cancel.cancel();
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(SHUTDOWN_GRACE, task).await.is_err() {
                abort.abort();
            }
        }
        self.recording()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/v1/chat/completions",
            post(chat_completions).fallback(not_found),
        )
        .route(
            "/chat/completions",
            post(chat_completions).fallback(not_found),
        )
        .route("/v1/models", get(models).fallback(not_found))
        .route("/models", get(models).fallback(not_found))
        .fallback(not_found)
        .with_state(shared)
}

/// What every record takes from the request line and headers.
struct RequestHead {
    seq: u64,
    at: f64,
    method: String,
    path: String,
    headers: Vec<String>,
    size: usize,
    body_sha256: String,
}

impl Shared {
    fn head(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &ReadBody,
    ) -> RequestHead {
        RequestHead {
            seq: self.seq.fetch_add(1, Ordering::SeqCst),
            at: self.started.elapsed().as_secs_f64(),
            method: method.to_string(),
            path: uri.path().to_string(),
            headers: bounded_headers(headers),
            size: body.size,
            body_sha256: body.sha256.clone(),
        }
    }

    fn push(&self, record: RequestRecord) {
        if let Some(observer) = &self.observer {
            observer(&record);
        }
        self.records.lock().unwrap().push(record);
    }

    /// Record a request that is not a chat completion (counted as auxiliary).
    fn push_other(&self, head: RequestHead, reply: &str) {
        self.aux.fetch_add(1, Ordering::SeqCst);
        self.push(RequestRecord {
            seq: head.seq,
            at: head.at,
            kind: CallKind::Aux,
            main_index: None,
            method: head.method,
            path: head.path,
            headers: head.headers,
            size: head.size,
            body_sha256: head.body_sha256,
            stream: false,
            model: None,
            messages: Vec::new(),
            messages_dropped: 0,
            truncated: false,
            reply: reply.to_string(),
            rule: None,
        });
    }

    /// Hold until the counter reports enough processes, the rule's timeout
    /// passes, or the provider shuts down: (enough were seen, the most seen).
    async fn wait_for(&self, w: &WaitFor) -> (bool, usize) {
        let limit = secs(w.timeout);
        let Some(counter) = &self.process_counter else {
            wait_or_cancel(limit, &self.cancel).await;
            return (false, 0);
        };
        let deadline = Instant::now() + limit;
        let mut most = 0;
        loop {
            let counter = counter.clone();
            let needle = w.cmdline.clone();
            // A real counter scans /proc: keep it off the async workers.
            let n = tokio::task::spawn_blocking(move || counter(&needle))
                .await
                .unwrap_or(0);
            most = most.max(n);
            if n >= w.count {
                return (true, most);
            }
            let now = Instant::now();
            if now >= deadline {
                return (false, most);
            }
            if !wait_or_cancel(WAIT_FOR_POLL.min(deadline - now), &self.cancel).await {
                return (false, most);
            }
        }
    }
}

/// A request body read within [`BODY_LIMIT`].
#[derive(Default)]
struct ReadBody {
    /// The bytes, or None when the body was longer than the limit.
    bytes: Option<Vec<u8>>,
    /// Its full length.
    size: usize,
    /// SHA-256 of the whole body, hex (empty for an empty body).
    sha256: String,
}

/// Read a body to its end, holding at most [`BODY_LIMIT`] bytes of it.
async fn read_body(body: Body, headers: &HeaderMap) -> ReadBody {
    use futures_util::StreamExt;
    let hint = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .unwrap_or(0);
    let mut bytes = Some(Vec::with_capacity(hint.min(BODY_LIMIT)));
    let mut size = 0;
    let mut hash = BodyHash::default();
    let mut stream = body.into_data_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        size += chunk.len();
        hash.update(&chunk);
        if let Some(b) = bytes.as_mut() {
            if b.len() + chunk.len() > BODY_LIMIT {
                bytes = None;
            } else {
                b.extend_from_slice(&chunk);
            }
        }
    }
    ReadBody {
        bytes,
        size,
        sha256: hash.finish(),
    }
}

fn bounded_headers(headers: &HeaderMap) -> Vec<String> {
    let mut out = Vec::new();
    let mut used = 0;
    for (name, value) in headers {
        let line = format!("{}: {}", name, String::from_utf8_lossy(value.as_bytes()));
        if used + line.len() > HEADERS_KEEP_BYTES {
            break;
        }
        used += line.len();
        out.push(line);
    }
    out
}

async fn not_found(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let body = read_body(body, &headers).await;
    let head = shared.head(&method, &uri, &headers, &body);
    drop(body);
    let message = format!("chaosrun: no route for {} {}", head.method, head.path);
    shared.push_other(head, "not_found");
    sse::error_response(404, &message)
}

async fn models(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let head = shared.head(&method, &uri, &headers, &ReadBody::default());
    shared.push_other(head, "models");
    let created = unix_now();
    let body = serde_json::json!({
        "object": "list",
        "data": [{"id": "chaosrun", "object": "model", "created": created, "owned_by": "chaosrun"}],
    });
    sse::json_response(StatusCode::OK, &body)
}

// ---- request parsing -------------------------------------------------------

#[derive(Deserialize)]
struct ChatRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    messages: Option<Vec<InMessage>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    tools: Option<Vec<serde::de::IgnoredAny>>,
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

/// What classification and recording need from a parsed body.
struct Parsed {
    model: Option<String>,
    stream: bool,
    has_tools: bool,
    messages: Vec<WireMessage>,
    truncated: bool,
    last_is_tool: bool,
    /// The nonce of a `[[probe:NONCE]]` marker in the latest user message.
    probe: Option<String>,
}

fn parse(body: &[u8], nonce: &str) -> Result<Parsed, String> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err("request body must be a JSON object".into());
    }
    let req: ChatRequest = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let mut truncated = false;
    let mut probe = None;
    let raw_messages = req.messages.unwrap_or_default();
    let last_user = raw_messages
        .iter()
        .rposition(|m| m.role.as_deref() == Some("user"));
    let last_is_tool = raw_messages
        .last()
        .is_some_and(|m| m.role.as_deref() == Some("tool"));
    let mut messages = Vec::with_capacity(raw_messages.len());
    for (pos, m) in raw_messages.into_iter().enumerate() {
        let text = content_text(m.content);
        if Some(pos) == last_user {
            probe = probe_marker(&text, nonce);
        }
        let (content, content_chars) = bound(text, &mut truncated);
        let tool_calls = m
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .map(|c| {
                let f = c.function.unwrap_or(InFunction {
                    name: None,
                    arguments: None,
                });
                let arguments = match f.arguments {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s,
                    Some(other) => other.to_string(),
                };
                WireToolCall {
                    id: c.id.unwrap_or_default(),
                    name: f.name.unwrap_or_default(),
                    arguments: bound(arguments, &mut truncated).0,
                }
            })
            .collect();
        messages.push(WireMessage {
            role: m.role.unwrap_or_default(),
            content,
            content_chars,
            tool_call_id: m.tool_call_id,
            tool_calls,
        });
    }
    Ok(Parsed {
        model: req.model,
        stream: req.stream.unwrap_or(false),
        has_tools: req.tools.is_some_and(|t| !t.is_empty()),
        messages,
        truncated,
        last_is_tool,
        probe,
    })
}

/// A message's text: a string, nothing for null, or the text parts joined.
fn content_text(content: Option<Value>) -> String {
    match content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) => o.get("text").and_then(Value::as_str),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
    }
}

/// Cut `s` to [`CONTENT_KEEP_CHARS`] chars; returns it and its full length.
fn bound(s: String, truncated: &mut bool) -> (String, usize) {
    if s.len() <= CONTENT_KEEP_CHARS {
        let n = s.chars().count();
        return (s, n);
    }
    let n = s.chars().count();
    match s.char_indices().nth(CONTENT_KEEP_CHARS) {
        Some((end, _)) => {
            *truncated = true;
            (s[..end].to_string(), n)
        }
        None => (s, n),
    }
}

/// `[[probe:X]]` in `text`: with a configured nonce only X = nonce counts;
/// with none, any X does.
fn probe_marker(text: &str, nonce: &str) -> Option<String> {
    if !nonce.is_empty() {
        return text
            .contains(&format!("[[probe:{nonce}]]"))
            .then(|| nonce.to_string());
    }
    let start = text.find("[[probe:")? + "[[probe:".len();
    let len = text[start..].find("]]")?;
    Some(text[start..start + len].to_string())
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

// ---- the chat handler ------------------------------------------------------

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let body = read_body(body, &headers).await;
    let head = shared.head(&method, &uri, &headers, &body);
    let Some(bytes) = body.bytes else {
        let message = format!(
            "chaosrun: request body of {} bytes is over the {BODY_LIMIT}-byte limit",
            head.size
        );
        shared.push_other(head, "too_large");
        return sse::error_response(413, &message);
    };
    let parsed = parse(&bytes, &shared.nonce);
    // Never keep the raw body after parsing.
    drop(bytes);
    let parsed = match parsed {
        Ok(p) => p,
        Err(e) => {
            shared.push_other(head, "bad_request");
            return sse::error_response(400, &format!("chaosrun: malformed request body: {e}"));
        }
    };

    let probe_reply;
    let aux_reply;
    let (kind, main_index, picked): (CallKind, Option<u64>, Option<(usize, &Rule)>) =
        if parsed.probe.is_some() {
            shared.probe.fetch_add(1, Ordering::SeqCst);
            (CallKind::Probe, None, None)
        } else if parsed.has_tools {
            let index = shared.main.fetch_add(1, Ordering::SeqCst);
            shared.main_tx.send_modify(|v| *v = (*v).max(index + 1));
            let picked = rules::pick_indexed(&shared.rules, index, parsed.last_is_tool);
            (CallKind::Main, Some(index), picked)
        } else {
            shared.aux.fetch_add(1, Ordering::SeqCst);
            (CallKind::Aux, None, None)
        };
    let rule = picked.map(|(_, r)| r);
    if let Some((i, _)) = picked {
        shared.rule_hits[i].fetch_add(1, Ordering::SeqCst);
    }
    let reply: &Reply = match (kind, rule) {
        (_, Some(rule)) => &rule.reply,
        (CallKind::Probe, _) => {
            let nonce = parsed.probe.as_deref().unwrap_or_default();
            probe_reply = Reply::Text(Text::plain(format!("alive {nonce}")));
            &probe_reply
        }
        _ => {
            aux_reply = Reply::Text(Text::plain("ok"));
            &aux_reply
        }
    };

    shared.push(RequestRecord {
        seq: head.seq,
        at: head.at,
        kind,
        main_index,
        method: head.method,
        path: head.path,
        headers: head.headers,
        size: head.size,
        body_sha256: head.body_sha256,
        stream: parsed.stream,
        model: parsed.model.clone(),
        messages: parsed.messages,
        messages_dropped: 0,
        truncated: parsed.truncated,
        reply: reply.kind_name().to_string(),
        rule: picked.map(|(i, _)| i),
    });

    if let Some((i, w)) = picked.and_then(|(i, r)| Some((i, r.wait_for.as_ref()?))) {
        let (satisfied, seen) = shared.wait_for(w).await;
        let mut waits = shared.waits.lock().unwrap();
        if waits.len() < WAITS_KEEP {
            waits.push(WaitOutcome {
                rule: i,
                main_index: main_index.unwrap_or(0),
                satisfied,
                seen,
            });
        }
    }

    let reply_seq = shared.reply_seq.fetch_add(1, Ordering::SeqCst);
    let call_id_prefix = format!("call_{}_{reply_seq}", shared.prefix);
    let ctx = ReplyCtx {
        nonce: &shared.nonce,
        stream: parsed.stream,
        meta: ChunkMeta {
            id: format!("chatcmpl-{}{reply_seq}", shared.prefix),
            created: unix_now(),
            model: parsed.model.unwrap_or_else(|| "chaosrun".into()),
        },
        request_bytes: head.size,
        cancel: &shared.cancel,
        main_index: main_index.unwrap_or(0),
        tools: &shared.tools,
        call_id_prefix: &call_id_prefix,
    };
    let replied = reply.respond(&ctx).await;
    if !replied.issued.is_empty() {
        shared.issued.lock().unwrap().extend(replied.issued);
    }
    replied.response.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_parts_and_bounds_content() {
        let big = "x".repeat(CONTENT_KEEP_CHARS + 10);
        let body = serde_json::json!({
            "model": "m",
            "stream": true,
            "tools": [{"type": "function"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "[[probe:N]]"}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": big},
            ],
        });
        let p = parse(body.to_string().as_bytes(), "N").unwrap();
        assert!(p.stream && p.has_tools && p.last_is_tool && p.truncated);
        assert_eq!(p.probe.as_deref(), Some("N"));
        assert_eq!(p.messages[0].content, "a\n[[probe:N]]");
        assert_eq!(p.messages[1].tool_calls[0].id, "c1");
        assert_eq!(p.messages[2].content.len(), CONTENT_KEEP_CHARS);
        assert_eq!(p.messages[2].content_chars, CONTENT_KEEP_CHARS + 10);
    }

    #[test]
    fn probe_needs_the_right_nonce_when_one_is_set() {
        assert_eq!(probe_marker("hi [[probe:A]]", "B"), None);
        assert_eq!(probe_marker("hi [[probe:A]]", ""), Some("A".into()));
        assert_eq!(probe_marker("hi [[probe:A]]", "A"), Some("A".into()));
    }

    #[test]
    fn malformed_bodies_are_rejected() {
        assert!(parse(b"{not json", "").is_err());
        assert!(parse(b"[]", "").is_err());
        assert!(parse(b"{\"messages\": 3}", "").is_err());
        assert!(parse(b"{}", "").is_ok());
    }
}
