//! The axum server behind [`super::Provider`]: routing by the configured wire,
//! request classification (probe / main / auxiliary), rule selection and
//! `wait_for`, recording, the Responses conversation store behind
//! `previous_response_id`, and a shutdown that cuts every long wait at once.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::serve::ListenerExt;
use axum::Router;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::recording::{
    BodyHash, CallKind, IssuedToolCall, Recorder, Recording, RequestRecord, WaitOutcome,
    HEADERS_KEEP_BYTES,
};
use super::replies::{secs, wait_or_cancel, Beat, Plan, Reply, ReplyCtx, Text};
use super::rules::{self, Rule, WaitFor};
use super::wire::{self, json_response, request, Answer, ErrorInfo, Event, Meta, Route, Wire};
use super::{ProcessCounter, ProviderConfig, ToolMapping};
use crate::message::{Message, ToolCall};

use super::RequestObserver as Observer;

/// Largest request body held and parsed (an agent may send a 30 MB tool
/// output); a longer one is drained, counted and hashed as it arrives, never
/// held, and refused with 413.
pub(crate) const BODY_LIMIT: usize = 64 * 1024 * 1024;
/// `wait_for` outcomes kept per provider (the first ones; the rest dropped).
const WAITS_KEEP: usize = 256;
/// How often a `wait_for` rule re-counts processes.
const WAIT_FOR_POLL: Duration = Duration::from_millis(50);
/// How long `shutdown` lets connections close by themselves before aborting.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// How many Responses conversations are kept for `previous_response_id`.
const CONVERSATIONS_KEPT: usize = 16;

/// A serving provider.
pub(crate) struct Running {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

struct Shared {
    wire: Wire,
    rules: Vec<Rule>,
    nonce: String,
    tools: BTreeMap<String, ToolMapping>,
    process_counter: Option<ProcessCounter>,
    observer: Option<Observer>,
    started: Instant,
    /// Random-ish per server, so ids differ between providers.
    prefix: String,
    seq: AtomicU64,
    /// A watch on `seq`: requests received so far, every route.
    seq_tx: watch::Sender<u64>,
    reply_seq: AtomicU64,
    main: AtomicU64,
    probe: AtomicU64,
    aux: AtomicU64,
    main_tx: watch::Sender<u64>,
    /// Subagent calls (see [`CallKind::Subagent`]), and a watch on them.
    subagent: AtomicU64,
    subagent_tx: watch::Sender<u64>,
    records: Mutex<Recorder>,
    issued: Mutex<Vec<IssuedToolCall>>,
    waits: Mutex<Vec<WaitOutcome>>,
    /// Main calls answered by each responder rule (exact, like the counters).
    rule_hits: Vec<AtomicU64>,
    /// Responses: response id → the conversation up to and with its answer.
    conversations: Mutex<VecDeque<(String, Vec<Message>)>>,
    /// Proxy mode: where unmatched calls and `relay` rules go, and what the
    /// relays left.
    upstream: Option<Arc<super::upstream::Upstream>>,
    relays: Arc<super::upstream::RelayLog>,
    /// Per responder rule: the cassette a `cassette` rule replays.
    players: Vec<Option<Arc<super::cassette::Player>>>,
    cancel: CancellationToken,
    /// Main calls over this many bytes get the context-length error.
    context_window: Option<super::ContextWindow>,
    /// The size of the first main call (a relative window counts from it).
    first_main_bytes: std::sync::OnceLock<usize>,
    /// When the first main call arrived (`within` rules count from it).
    first_main: std::sync::OnceLock<Instant>,
}

impl Running {
    pub(crate) async fn start(config: ProviderConfig) -> anyhow::Result<Running> {
        Running::start_observed(config, None).await
    }

    pub(crate) async fn start_observed(
        config: ProviderConfig,
        observer: Option<Observer>,
    ) -> anyhow::Result<Running> {
        let listener = crate::listen::loopback(config.bind.as_ref(), config.port)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot bind 127.0.0.1:{}: {e} (pick another --port, or 0 for any free one)",
                    config.port
                )
            })?;
        let addr = listener.local_addr()?;
        if let Some(up) = &config.upstream {
            if up.points_at(addr).await {
                anyhow::bail!(
                    "upstream {} is this proxy's own address {addr}: every call would be \
                     relayed to itself; give the real server's URL",
                    up.base()
                );
            }
        }
        let (main_tx, _) = watch::channel(0u64);
        let players = load_players(&config.rules).map_err(anyhow::Error::msg)?;
        let rule_hits = config.rules.iter().map(|_| AtomicU64::new(0)).collect();
        let shared = Arc::new(Shared {
            wire: config.wire,
            rules: config.rules,
            nonce: config.nonce,
            tools: config.tools,
            process_counter: config.process_counter,
            observer,
            started: Instant::now(),
            prefix: format!("{:06x}", rand::random::<u32>() & 0xff_ffff),
            seq: AtomicU64::new(0),
            seq_tx: watch::channel(0u64).0,
            reply_seq: AtomicU64::new(0),
            main: AtomicU64::new(0),
            probe: AtomicU64::new(0),
            aux: AtomicU64::new(0),
            main_tx,
            subagent: AtomicU64::new(0),
            subagent_tx: watch::channel(0u64).0,
            records: Mutex::new(Recorder::new(config.record)),
            waits: Mutex::new(Vec::new()),
            rule_hits,
            issued: Mutex::new(Vec::new()),
            conversations: Mutex::new(VecDeque::new()),
            upstream: config.upstream,
            relays: Default::default(),
            players,
            cancel: CancellationToken::new(),
            context_window: config.context_window,
            first_main_bytes: std::sync::OnceLock::new(),
            first_main: std::sync::OnceLock::new(),
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

    pub(crate) fn wire(&self) -> Wire {
        self.shared.wire
    }

    pub(crate) fn main_calls(&self) -> watch::Receiver<u64> {
        self.shared.main_tx.subscribe()
    }

    pub(crate) fn subagent_calls(&self) -> watch::Receiver<u64> {
        self.shared.subagent_tx.subscribe()
    }

    pub(crate) fn requests(&self) -> watch::Receiver<u64> {
        self.shared.seq_tx.subscribe()
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
            subagent_calls: self.shared.subagent.load(Ordering::SeqCst),
            relays: self.shared.relays.relays.lock().unwrap().clone(),
            upstream_errors: self.shared.relays.errors.lock().unwrap().clone(),
        }
    }

    /// What the relays left (cassette entries recorded with `--record`).
    pub(crate) fn relay_log(&self) -> Arc<super::upstream::RelayLog> {
        self.shared.relays.clone()
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

/// The cassette of each `cassette` rule, loaded once (a file two rules name
/// is one player: its entries are used once across both).
fn load_players(rules: &[Rule]) -> Result<Vec<Option<Arc<super::cassette::Player>>>, String> {
    let mut by_file: Vec<(std::path::PathBuf, Arc<super::cassette::Player>)> = Vec::new();
    let mut out = Vec::with_capacity(rules.len());
    for rule in rules {
        let Reply::Cassette(c) = &rule.reply else {
            out.push(None);
            continue;
        };
        if let Some((_, p)) = by_file.iter().find(|(f, _)| *f == c.file) {
            out.push(Some(p.clone()));
            continue;
        }
        let cassette = super::cassette::load(&c.file)?;
        let p = Arc::new(super::cassette::Player::new(
            c.file.display().to_string(),
            cassette,
        ));
        by_file.push((c.file.clone(), p.clone()));
        out.push(Some(p));
    }
    Ok(out)
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
    Router::new().fallback(dispatch).with_state(shared)
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
    /// A request that came back to this proxy: 508, and the scenario is an
    /// ERROR (the upstream leads back here).
    fn refuse_loop(&self, head: RequestHead) -> Response {
        let base = self.upstream.as_ref().map_or("", |u| u.base());
        let message = format!(
            "chaosrun: this request came back to the proxy that relayed it: upstream {base} \
             leads back here (a relay loop)"
        );
        self.relays.error(message.clone());
        self.push_other(head, "relay_loop", None);
        self.wire.error_response(&ErrorInfo::new(508, message))
    }

    /// Cassettes: the call's match key when a `cassette` rule replays it or
    /// `--record` records it, and what the recording starts from.
    fn cassette_key(
        &self,
        reply: &Reply,
        relayed: bool,
        kind: CallKind,
        main_index: Option<u64>,
        parsed: &request::Parsed,
    ) -> (
        Option<super::cassette::MatchKey>,
        Option<super::cassette::tape::TapeStart>,
    ) {
        let taped =
            relayed && kind == CallKind::Main && self.upstream.as_ref().is_some_and(|u| u.tape);
        if !taped && !matches!(reply, Reply::Cassette(_)) {
            return (None, None);
        }
        let key = super::cassette::key_of(parsed.messages.last(), &self.nonce);
        let tape = taped.then(|| super::cassette::tape::TapeStart {
            main_index: main_index.unwrap_or(0),
            key: key.clone(),
            request: parsed.messages.clone(),
            nonce: self.nonce.clone(),
        });
        (Some(key), tape)
    }

    /// The reply of a `cassette` rule (rule `i`) to main call `index`: the
    /// matching entry's answer with the rule's fault, or, on a miss, a 500
    /// naming the call (and the scenario is an ERROR).
    fn replay(
        &self,
        i: usize,
        c: &super::replies::CassetteReply,
        index: u64,
        key: &super::cassette::MatchKey,
        ctx: &ReplyCtx<'_>,
    ) -> super::replies::Planned {
        use super::replies::ReplyKind;
        let Some(player) = self.players.get(i).and_then(Option::as_ref) else {
            return c.planned(ctx);
        };
        let fault = super::upstream::faults::acting(c.fault.as_ref());
        let plan = match (player.take(index, key), fault.replacement()) {
            (Ok(_), Some(e)) => e.plan(ctx),
            (Ok(entry), None) => super::cassette::player::plan(&entry, &self.nonce, fault),
            (Err(miss), _) => {
                self.relays.error(miss.clone());
                Plan::Error(ErrorInfo::new(500, format!("chaosrun: {miss}")))
            }
        };
        super::replies::Planned {
            plan,
            issued: Vec::new(),
        }
    }

    fn head(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &ReadBody,
    ) -> RequestHead {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        self.seq_tx.send_modify(|v| *v = (*v).max(seq + 1));
        RequestHead {
            seq,
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

    /// Record a request that is not a model call, or one refused (counted as
    /// auxiliary).
    fn push_other(&self, head: RequestHead, reply: &str, previous_response_id: Option<String>) {
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
            tools: Vec::new(),
            messages: Vec::new(),
            messages_dropped: 0,
            truncated: false,
            reply: reply.to_string(),
            rule: None,
            previous_response_id,
            error: None,
        });
    }

    /// The conversation stored under a Responses id.
    fn conversation(&self, id: &str) -> Option<Vec<Message>> {
        let kept = self.conversations.lock().unwrap();
        kept.iter().find(|(k, _)| k == id).map(|(_, m)| m.clone())
    }

    /// Keep `history` and the answer `beats` give under `id`, when the answer
    /// finishes (a cut or failed reply leaves nothing to continue).
    fn remember(&self, id: &str, mut history: Vec<Message>, beats: &[Beat]) {
        let events: Vec<Event> = beats
            .iter()
            .filter_map(|b| match b {
                Beat::Emit(e) => Some(e.clone()),
                _ => None,
            })
            .collect();
        let answer = Answer::collect(&events);
        if answer.finish.is_none() || answer.error.is_some() {
            return;
        }
        let mut truncated = false;
        let (content, content_chars) = request::bound(answer.text, &mut truncated);
        let (reasoning, reasoning_chars) =
            request::bound(answer.reasoning.unwrap_or_default(), &mut truncated);
        history.push(Message {
            role: "assistant".into(),
            content,
            content_chars,
            reasoning,
            reasoning_chars,
            tool_call_id: None,
            tool_calls: answer
                .calls
                .into_iter()
                .map(|c| ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: request::bound(c.arguments, &mut truncated).0,
                })
                .collect(),
        });
        let mut kept = self.conversations.lock().unwrap();
        if kept.len() >= CONVERSATIONS_KEPT {
            kept.pop_front();
        }
        kept.push_back((id.to_string(), history));
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

/// Request headers whose values are credentials (kept out of recordings).
const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "cookie",
];

fn bounded_headers(headers: &HeaderMap) -> Vec<String> {
    let mut out = Vec::new();
    let mut used = 0;
    for (name, value) in headers {
        // A credential is never recorded, only that one was sent.
        let line = if CREDENTIAL_HEADERS.contains(&name.as_str()) {
            format!("{name}: <redacted, {} bytes>", value.len())
        } else {
            format!("{}: {}", name, String::from_utf8_lossy(value.as_bytes()))
        };
        if used + line.len() > HEADERS_KEEP_BYTES {
            break;
        }
        used += line.len();
        out.push(line);
    }
    out
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

async fn dispatch(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let body = read_body(body, &headers).await;
    let head = shared.head(&method, &uri, &headers, &body);
    let wire = shared.wire;
    match wire.route(method.as_str(), uri.path()) {
        Route::NotServed => {
            drop(body);
            let message = format!(
                "chaosrun: no route for {} {} on the {wire} wire",
                head.method, head.path
            );
            shared.push_other(head, "not_found", None);
            wire.error_response(&ErrorInfo::new(404, message))
        }
        Route::Models => {
            drop(body);
            shared.push_other(head, "models", None);
            json_response(
                StatusCode::OK,
                &wire.models(crate::units::unix_now() as u64),
            )
        }
        Route::Generate { stream, model } => {
            let call = Forward {
                query: uri.query().map(String::from),
                headers,
            };
            generate(shared, head, body, stream, model, call).await
        }
    }
}

// ---- the model call --------------------------------------------------------

/// What proxy mode forwards besides the body.
struct Forward {
    query: Option<String>,
    headers: HeaderMap,
}

/// The request parsed (and, on Responses, its stored conversation
/// prepended), with the raw body kept only for an upstream; or the error
/// response that refuses it (too large, malformed, unknown previous id).
#[allow(clippy::result_large_err)]
fn parse_call(
    shared: &Shared,
    head: RequestHead,
    body: ReadBody,
    stream: Option<bool>,
    model: Option<String>,
    forward: &Forward,
) -> Result<(RequestHead, request::Parsed, Option<Vec<u8>>), Response> {
    let wire = shared.wire;
    let Some(bytes) = body.bytes else {
        let message = format!(
            "chaosrun: request body of {} bytes is over the {BODY_LIMIT}-byte limit",
            head.size
        );
        shared.push_other(head, "too_large", None);
        return Err(wire.error_response(&ErrorInfo::new(413, message)));
    };
    if shared
        .upstream
        .as_ref()
        .is_some_and(|u| u.is_loop(&forward.headers))
    {
        return Err(shared.refuse_loop(head));
    }
    let parsed = request::parse(wire, &bytes, stream, model, &shared.nonce);
    // Never keep the raw body after parsing, unless it goes upstream.
    let upstream_body = shared.upstream.is_some().then_some(bytes);
    let mut parsed = match parsed {
        Ok(p) => p,
        Err(e) => {
            shared.push_other(head, "bad_request", None);
            let message = format!("chaosrun: malformed request body: {e}");
            return Err(wire.error_response(&ErrorInfo::new(400, message)));
        }
    };
    if let Some(previous) = parsed.previous_response_id.clone() {
        match shared.conversation(&previous) {
            Some(mut earlier) => {
                earlier.append(&mut parsed.messages);
                parsed.messages = earlier;
            }
            // Proxy mode: the upstream may know it (it answered that call).
            None if shared.upstream.is_some() => {}
            None => {
                shared.push_other(head, "bad_request", Some(previous.clone()));
                let mut e = ErrorInfo::new(
                    400,
                    format!("Previous response with id '{previous}' not found."),
                );
                e.code = Some("previous_response_not_found".into());
                return Err(wire.error_response(&e));
            }
        }
    }

    Ok((head, parsed, upstream_body))
}

async fn generate(
    shared: Arc<Shared>,
    head: RequestHead,
    body: ReadBody,
    stream: Option<bool>,
    model: Option<String>,
    forward: Forward,
) -> Response {
    let wire = shared.wire;
    let (head, parsed, upstream_body) =
        match parse_call(&shared, head, body, stream, model, &forward) {
            Ok(call) => call,
            Err(resp) => return resp,
        };
    let class = shared.classify(&parsed, head.size);
    let (kind, main_index, picked) = (class.kind, class.main_index, class.picked);
    let rule = picked.map(|(_, r)| r);
    let default_reply;
    let reply: &Reply = match rule {
        Some(rule) => &rule.reply,
        None => {
            default_reply = unscripted(kind, parsed.probe.as_deref(), &shared.nonce);
            &default_reply
        }
    };
    if let Some(overflow) = class.overflow {
        shared.push(record(head, parsed, kind, main_index, None, overflow.0));
        return wire.error_response(&overflow.1);
    }

    // Proxy mode: unmatched calls and `relay` rules go upstream.
    let relayed = match (&shared.upstream, reply) {
        (Some(_), Reply::Relay(r)) => Some(r.fault.clone()),
        (Some(_), _) if rule.is_none() => Some(None),
        _ => None,
    };
    let (key, tape) = shared.cassette_key(reply, relayed.is_some(), kind, main_index, &parsed);
    // Responses: what this reply's conversation is, to continue it later.
    let history = wire
        .format()
        .keeps_conversations()
        .then(|| parsed.messages.clone());
    let path = head.path.clone();
    let served = match &relayed {
        Some(_) => Served::named("relay"),
        None => Served::reply(reply, wire, parsed.stream),
    };
    let (stream, model) = (parsed.stream, parsed.model.clone());
    let (seq, size) = (head.seq, head.size);
    shared.push(record(
        head,
        parsed,
        kind,
        main_index,
        picked.map(|(i, _)| i),
        served,
    ));

    shared.hold(picked, main_index).await;
    let call = Accepted {
        reply,
        picked,
        main_index,
        key,
        tape,
        relayed,
        history,
        path,
        stream,
        model,
        seq,
        size,
    };
    answer(&shared, call, upstream_body, &forward).await
}

/// A recorded call, ready to be answered.
struct Accepted<'a> {
    reply: &'a Reply,
    picked: Option<(usize, &'a Rule)>,
    main_index: Option<u64>,
    key: Option<super::cassette::MatchKey>,
    tape: Option<super::cassette::tape::TapeStart>,
    /// Relayed upstream, with this fault (or none).
    relayed: Option<Option<super::upstream::faults::Fault>>,
    /// Responses: the conversation, to continue it later.
    history: Option<Vec<Message>>,
    path: String,
    stream: bool,
    model: Option<String>,
    seq: u64,
    size: usize,
}

/// Plan and play the reply of `call` (or relay it upstream).
async fn answer(
    shared: &Shared,
    call: Accepted<'_>,
    upstream_body: Option<Vec<u8>>,
    forward: &Forward,
) -> Response {
    let wire = shared.wire;
    let reply_seq = shared.reply_seq.fetch_add(1, Ordering::SeqCst);
    let call_id_prefix = format!("call_{}_{reply_seq}", shared.prefix);
    let ctx = ReplyCtx {
        nonce: &shared.nonce,
        request_bytes: call.size,
        main_index: call.main_index.unwrap_or(0),
        tools: &shared.tools,
        call_id_prefix: &call_id_prefix,
    };
    let planned = match (call.reply, call.picked, &call.key) {
        (Reply::Cassette(c), Some((i, _)), Some(key)) => {
            shared.replay(i, c, call.main_index.unwrap_or(0), key, &ctx)
        }
        _ => call.reply.plan(&ctx),
    };
    if !planned.issued.is_empty() {
        shared.issued.lock().unwrap().extend(planned.issued);
    }
    let meta = Meta {
        id: format!("{}{}{reply_seq}", wire.id_prefix(), shared.prefix),
        created: crate::units::unix_now() as u64,
        model: call.model.unwrap_or_else(|| "chaosrun".into()),
        request_bytes: call.size,
    };
    if let (Some(fault), Some(up), Some(body)) = (call.relayed, &shared.upstream, upstream_body) {
        let relayed = super::upstream::Call {
            seq: call.seq,
            wire,
            path: &call.path,
            query: forward.query.as_deref(),
            headers: &forward.headers,
            stream: call.stream,
            ctx: &ctx,
            meta: &meta,
            tape: call.tape,
        };
        let log = shared.relays.clone();
        return super::upstream::relay(up, relayed, body, fault.as_ref(), log, &shared.cancel)
            .await;
    }
    if let (Some(history), Plan::Beats(beats)) = (call.history, &planned.plan) {
        shared.remember(&meta.id, history, beats);
    }
    wire::render(planned.plan, wire, call.stream, &meta, &shared.cancel).await
}

/// The answer to a call no rule scripts: `alive NONCE` to a probe,
/// `subagent done NONCE` to a subagent's call, `ok` otherwise.
fn unscripted(kind: CallKind, probe: Option<&str>, nonce: &str) -> Reply {
    let text = match kind {
        CallKind::Probe => format!("alive {}", probe.unwrap_or_default()),
        CallKind::Subagent => format!("subagent done {nonce}"),
        _ => "ok".to_string(),
    };
    Reply::Text(Text::plain(text))
}

impl Shared {
    /// Hold a call whose rule has `wait_for`, and keep how the wait ended.
    async fn hold(&self, picked: Option<(usize, &Rule)>, main_index: Option<u64>) {
        let Some((i, w)) = picked.and_then(|(i, r)| Some((i, r.wait_for.as_ref()?))) else {
            return;
        };
        let (satisfied, seen) = self.wait_for(w).await;
        let mut waits = self.waits.lock().unwrap();
        if waits.len() < WAITS_KEEP {
            waits.push(WaitOutcome {
                rule: i,
                main_index: main_index.unwrap_or(0),
                satisfied,
                seen,
            });
        }
    }
}

/// What one model call is: its kind, main index and rule, or, for a main
/// call over the context window, the record and error that answer it.
struct Classified<'a> {
    kind: CallKind,
    main_index: Option<u64>,
    picked: Option<(usize, &'a Rule)>,
    overflow: Option<(Served, ErrorInfo)>,
}

/// What a record says was served.
struct Served {
    reply: String,
    error: Option<super::recording::ReplyError>,
}

impl Served {
    fn named(reply: &str) -> Served {
        Served {
            reply: reply.to_string(),
            error: None,
        }
    }

    /// The reply's error hint as this wire delivers it: the status the wire
    /// gives a classed error, and no retry-after where the wire's mid-stream
    /// error event cannot carry one (only Gemini's error frame has
    /// `RetryInfo`).
    fn reply(reply: &Reply, wire: Wire, stream: bool) -> Served {
        let mut error = reply.error_hint();
        if let (Some(hint), Reply::QuotaExhausted(_)) = (error.as_mut(), reply) {
            let class = wire::ErrorClass::Quota;
            hint.status = wire.shape_error(&ErrorInfo::of_class(class)).status;
        }
        if let (Some(hint), Reply::Error(e)) = (error.as_mut(), reply) {
            if e.mid_stream && stream && !wire.format().mid_stream_retry_after() {
                hint.retry_after = None;
            }
        }
        Served {
            reply: reply.kind_name().to_string(),
            error,
        }
    }
}

impl Shared {
    /// Probe, main (with its rule, or over the context window) or auxiliary,
    /// counted.
    fn classify(&self, parsed: &request::Parsed, size: usize) -> Classified<'_> {
        let mut out = Classified {
            kind: CallKind::Aux,
            main_index: None,
            picked: None,
            overflow: None,
        };
        if parsed.probe.is_some() {
            self.probe.fetch_add(1, Ordering::SeqCst);
            out.kind = CallKind::Probe;
            return out;
        }
        if parsed.subagent {
            let index = self.subagent.fetch_add(1, Ordering::SeqCst);
            self.subagent_tx.send_modify(|v| *v = (*v).max(index + 1));
            out.kind = CallKind::Subagent;
            out.main_index = Some(index);
            out.picked = rules::pick_at(&self.rules, index, parsed.last_is_tool, true, 0.0);
            if let Some((i, _)) = out.picked {
                self.rule_hits[i].fetch_add(1, Ordering::SeqCst);
            }
            return out;
        }
        if !parsed.has_tools {
            self.aux.fetch_add(1, Ordering::SeqCst);
            return out;
        }
        let index = self.main.fetch_add(1, Ordering::SeqCst);
        self.main_tx.send_modify(|v| *v = (*v).max(index + 1));
        out.kind = CallKind::Main;
        out.main_index = Some(index);
        let elapsed = self.first_main.get_or_init(Instant::now).elapsed();
        let first = *self.first_main_bytes.get_or_init(|| size);
        let window = self.context_window.map(|w| w.limit(first));
        if let Some(max) = window.filter(|max| size > *max) {
            let class = wire::ErrorClass::ContextLength {
                tokens: (size as u64).div_ceil(4),
                max_tokens: (max as u64) / 4,
            };
            let e = self.wire.shape_error(&ErrorInfo::of_class(class));
            let served = Served {
                reply: "context_length_exceeded".into(),
                error: Some(super::recording::ReplyError {
                    status: e.status,
                    retry_after: None,
                    retryable: false,
                }),
            };
            out.overflow = Some((served, e));
            return out;
        }
        out.picked = rules::pick_at(
            &self.rules,
            index,
            parsed.last_is_tool,
            false,
            elapsed.as_secs_f64(),
        );
        if let Some((i, _)) = out.picked {
            self.rule_hits[i].fetch_add(1, Ordering::SeqCst);
        }
        out
    }
}

/// The record of a model call.
fn record(
    head: RequestHead,
    parsed: request::Parsed,
    kind: CallKind,
    main_index: Option<u64>,
    rule: Option<usize>,
    served: Served,
) -> RequestRecord {
    RequestRecord {
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
        model: parsed.model,
        tools: parsed.tools,
        messages: parsed.messages,
        messages_dropped: 0,
        truncated: parsed.truncated,
        reply: served.reply,
        rule,
        previous_response_id: parsed.previous_response_id,
        error: served.error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_headers_are_recorded_redacted() {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer sk-secret".parse().unwrap());
        h.insert("x-goog-api-key", "sk-secret".parse().unwrap());
        h.insert("content-type", "application/json".parse().unwrap());
        let lines = bounded_headers(&h);
        assert!(lines.iter().all(|l| !l.contains("sk-secret")), "{lines:?}");
        assert!(lines.contains(&"authorization: <redacted, 16 bytes>".to_string()));
        assert!(lines.contains(&"content-type: application/json".to_string()));
    }
}
