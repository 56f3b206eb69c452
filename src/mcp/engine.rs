//! The transport-neutral dispatcher: a message from a connection is parsed,
//! recorded, matched against the rules, and (for a request) turned into a
//! [`Job`] the transport plays into its own sink. Every request is played on
//! its own task, so a hung call never blocks a later request or a
//! cancellation on the same connection.
//!
//! Memory is bounded whatever the client sends: a job holds the request's
//! params with every string cut to [`HELD_STRING`] bytes (a multi-MB argument
//! is parsed once and never copied whole), the recording keeps a prefix, a
//! job ends as soon as its client went away (its sink closed), and each
//! transport caps the jobs in flight per session ([`MAX_IN_FLIGHT`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::record::{prefix, McpExchange, McpRecording, Recorder};
use super::replies::{Ctx, Frame, Out, Reply, Tx};
use super::rules::{self, Rule};
use super::upstream::{Link, Upstream};

/// Requests in flight (received, not yet answered) per stdio connection or
/// HTTP session; past it the transport stops reading that client (stdio) or
/// holds its next request unread (HTTP) until one ends.
pub const MAX_IN_FLIGHT: usize = 64;
/// Bytes of each string of a request's params that its job keeps (the
/// probe's `text` echoed by the healthy answer is cut there too).
pub const HELD_STRING: usize = 64 * 1024;

/// The method recorded for a restart ([`Engine::restart`]).
pub const RESTART: &str = "<restart>";
/// How long a restart waits for the old stdio relays to be gone: a relay
/// exits at once on its exit record, but on a loaded machine (a table of
/// 60 rows at once on two cores) that took over 2 s, and a call written to
/// a relay still alive is lost with it.
pub const RESTART_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// One request to answer.
pub struct Job {
    pub ctx: Ctx,
    /// `None`: the healthy answer.
    pub reply: Option<Reply>,
    /// Proxy mode: the request relayed to the real server, its answer
    /// awaited before the reply plays (it stands for the healthy answer).
    relay: Option<super::upstream::link::Pending>,
    /// Where its exchange was recorded (None past the cap).
    slot: Option<usize>,
}

impl Job {
    /// Whether the transport may answer it as one JSON body.
    pub fn single_frame(&self) -> bool {
        self.reply.as_ref().is_none_or(Reply::single_frame)
    }
}

/// What one incoming message asks of the transport.
pub enum Incoming {
    /// A notification or a response: nothing to send.
    Nothing,
    /// A request to answer.
    Request(Box<Job>),
    /// Not a JSON-RPC message: answer this error frame.
    Invalid(Frame),
}

/// The shared state of one scenario's MCP server.
pub struct Engine {
    rules: Vec<Rule>,
    nonce: String,
    start: Instant,
    pub(crate) cancel: CancellationToken,
    pub(crate) linger: bool,
    /// Legacy SSE: streams never send their `endpoint` event.
    pub(crate) withhold_endpoint: bool,
    calls: AtomicU64,
    calls_tx: tokio::sync::watch::Sender<u64>,
    hits: Vec<AtomicU64>,
    rec: Mutex<Recorder>,
    /// A `schema_swap` changed the probe tool (see its file).
    swapped: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Proxy mode: the real server, and each connection's relay session.
    upstream: Option<Arc<Upstream>>,
    links: Mutex<HashMap<String, Arc<Link>>>,
    /// How many times the server restarted (`mcp.restart`): a stdio
    /// connection or an HTTP session of an earlier generation is gone.
    generation: tokio::sync::watch::Sender<u64>,
    /// Held (subscribed) by each stdio connection of this generation until
    /// its relay is gone: a restart waits for the old one's to close.
    conns: Mutex<tokio::sync::watch::Sender<()>>,
}

impl Engine {
    pub fn new(rules: Vec<Rule>, nonce: String, start: Instant, linger: bool) -> Engine {
        let hits = rules.iter().map(|_| AtomicU64::new(0)).collect();
        Engine {
            rules,
            nonce,
            start,
            cancel: CancellationToken::new(),
            linger,
            withhold_endpoint: false,
            calls: AtomicU64::new(0),
            calls_tx: tokio::sync::watch::channel(0).0,
            hits,
            rec: Mutex::new(Recorder::default()),
            swapped: Default::default(),
            upstream: None,
            links: Mutex::default(),
            generation: tokio::sync::watch::channel(0).0,
            conns: Mutex::new(tokio::sync::watch::channel(()).0),
        }
    }

    /// Answer by `rules` (replacing those given to [`Engine::new`]).
    pub fn with_rules(mut self, rules: Vec<Rule>) -> Engine {
        self.hits = rules.iter().map(|_| AtomicU64::new(0)).collect();
        self.rules = rules;
        self
    }

    /// Relay every request to `up` (proxy mode).
    pub fn with_upstream(mut self, up: Arc<Upstream>) -> Engine {
        self.upstream = Some(up);
        self
    }

    /// Proxy mode: open `conn`'s relay session now, with `sink` taking what
    /// the server sends on its own (a stdio connection).
    pub(crate) fn attach(&self, conn: &str, sink: Tx) {
        if let Some(up) = &self.upstream {
            let l = up.connect(Some(sink));
            self.links.lock().unwrap().insert(conn.to_string(), l);
        }
    }

    /// `conn`'s relay session, opened on its first message when not attached
    /// (an HTTP session: the server's own messages have nowhere to go).
    fn link(&self, conn: &str) -> Option<Arc<Link>> {
        let up = self.upstream.as_ref()?;
        let mut links = self.links.lock().unwrap();
        Some(
            links
                .entry(conn.to_string())
                .or_insert_with(|| up.connect(None))
                .clone(),
        )
    }

    /// Proxy mode: `conn` ended; its relay session closes (child reaped).
    pub(crate) async fn detach(&self, conn: &str) {
        let l = self.links.lock().unwrap().remove(conn);
        if let (Some(up), Some(l)) = (&self.upstream, l) {
            up.disconnect(&l).await;
        }
    }

    /// Proxy mode: close every relay session (children killed and reaped).
    pub(crate) async fn close_upstream(&self) {
        self.links.lock().unwrap().clear();
        if let Some(up) = &self.upstream {
            up.close().await;
        }
    }

    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Record and count (a stdio connection, an HTTP session, a DELETE).
    pub(crate) fn note(&self, conn: &str, what: &str) {
        let mut r = self.rec.lock().unwrap();
        match what {
            "stdio" => r.rec.stdio_connections += 1,
            "http" => r.rec.http_sessions += 1,
            "sse" => r.rec.sse_sessions += 1,
            _ => {
                let e = McpExchange {
                    at: self.now(),
                    conn: conn.into(),
                    method: what.into(),
                    ..Default::default()
                };
                r.push(e);
            }
        }
    }

    /// Record a message that is not one JSON-RPC object (a batch, or not
    /// JSON) and answer it with the JSON-RPC error for it.
    fn invalid(&self, bytes: &[u8], base: McpExchange) -> Incoming {
        let batch = bytes.trim_ascii_start().first() == Some(&b'[');
        self.rec.lock().unwrap().push(McpExchange {
            method: if batch { "<batch>" } else { "<unparseable>" }.into(),
            params: prefix(&String::from_utf8_lossy(bytes)),
            ..base
        });
        let (code, msg) = if batch {
            (-32600, "batches are not supported (protocol 2025-06-18)")
        } else {
            (-32700, "parse error: not a JSON-RPC object")
        };
        Incoming::Invalid(Frame::json(&json!({
            "jsonrpc": "2.0", "id": null, "error": {"code": code, "message": msg}
        })))
    }

    /// Parse, record and classify one message from `conn`.
    pub fn receive(&self, conn: &str, bytes: &[u8]) -> Incoming {
        let at = self.now();
        let base = McpExchange {
            at,
            conn: conn.to_string(),
            ..Default::default()
        };
        let msg: Value = match serde_json::from_slice(bytes) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) | Err(_) => return self.invalid(bytes, base),
        };
        let id = msg.get("id").filter(|v| !v.is_null()).cloned();
        let link = self.link(conn);
        let Some(method) = msg
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            self.rec.lock().unwrap().push(McpExchange {
                method: "<response>".into(),
                id,
                params: json_prefix(&msg),
                ..base
            });
            if let Some(l) = link {
                l.forward(msg);
            }
            return Incoming::Nothing;
        };
        let method = method.as_str();
        // Proxy mode: the whole message goes up (the job keeps a cut copy).
        let raw = link.as_ref().map(|_| msg.clone());
        let (params, params_text) = take_params(msg);
        let Some(id) = id else {
            if let (Some(l), Some(raw)) = (&link, raw) {
                l.forward(raw);
            }
            let cancels = (method == "notifications/cancelled")
                .then(|| params.get("requestId").cloned())
                .flatten();
            self.rec.lock().unwrap().push(McpExchange {
                method: method.into(),
                params: params_text,
                cancels,
                ..base
            });
            return Incoming::Nothing;
        };
        let call_index =
            (method == "tools/call").then(|| self.calls.fetch_add(1, Ordering::SeqCst));
        let tool = (method == "tools/call")
            .then(|| {
                params
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .flatten();
        let picked = rules::pick(&self.rules, method, call_index, tool.as_deref());
        let kind = picked.map_or("healthy", |(_, r)| r.reply.kind_name());
        if let Some((n, _)) = picked {
            self.hits[n].fetch_add(1, Ordering::SeqCst);
        }
        let slot = {
            let mut r = self.rec.lock().unwrap();
            if method == "tools/call" {
                r.rec.tool_calls += 1;
            }
            r.push(McpExchange {
                method: method.into(),
                id: Some(id.clone()),
                tool,
                call_index,
                params: params_text,
                rule: picked.map(|(n, _)| n),
                kind: Some(kind.into()),
                ..base
            })
        };
        if let Some(i) = call_index {
            self.calls_tx.send_replace(i + 1);
        }
        let relay = link.zip(raw).map(|(l, raw)| l.request(raw));
        Incoming::Request(Box::new(Job {
            ctx: Ctx {
                id,
                method: method.into(),
                params,
                nonce: self.nonce.clone(),
                cancel: self.cancel.clone(),
                swapped: self.swapped.clone(),
                relayed: None,
            },
            reply: picked.map(|(_, r)| r.reply.clone()),
            relay,
            slot,
        }))
    }

    /// Play `job` into `tx`; when it sent its final answer, record when. A
    /// job whose sink closed (its HTTP client disconnected, its stdio relay
    /// went away) ends there, and its state with it.
    pub async fn play(&self, job: Box<Job>, tx: Tx) {
        let mut job = *job;
        let playing = async {
            if let Some(p) = job.relay.take() {
                job.ctx.relayed = Some(self.relayed(p, &job.ctx).await);
            }
            match &job.reply {
                Some(r) => r.play(&job.ctx, &tx).await,
                None => super::replies::send(&tx, Out::Frame(job.ctx.healthy())).await,
            }
        };
        let answered = tokio::select! {
            a = playing => a,
            _ = tx.closed() => false,
        };
        if answered {
            if let Some(i) = job.slot {
                let at = self.now();
                if let Some(e) = self.rec.lock().unwrap().rec.exchanges.get_mut(i) {
                    e.answered = Some(at);
                }
            }
        }
    }

    /// The real server's answer to a relayed request, under the agent's id;
    /// when none comes, a JSON-RPC error saying why (and for `initialize`,
    /// bounded by `init_timeout`, a failure of the row).
    async fn relayed(&self, p: super::upstream::link::Pending, ctx: &Ctx) -> Frame {
        let up = self.upstream.as_ref();
        let init = ctx.method == "initialize";
        let bound = up.filter(|_| init).map(|u| u.init_bound());
        match p.wait(bound, &self.cancel).await {
            Ok(mut v) => {
                v["id"] = ctx.id.clone();
                self.rec.lock().unwrap().rec.relayed += 1;
                Frame::json(&v)
            }
            Err(why) => {
                if let (Some(u), true) = (up, init) {
                    u.fail(format!("{why} (initialize)"));
                }
                Frame::json(&json!({"jsonrpc": "2.0", "id": ctx.id,
                    "error": {"code": -32603, "message": format!("chaosrun relay: {why}")}}))
            }
        }
    }

    /// Restart the server as a real one restarts: every stdio server of
    /// the old generation exits (status 1) and every HTTP session issued
    /// before is unknown (404), and the server is healthy again at once.
    /// Returns once every old stdio relay is gone (its process exited, so
    /// a write to its stdin fails) or after [`RESTART_WAIT`]. Recorded as a
    /// `<restart>` exchange.
    pub async fn restart(&self) {
        self.note("", RESTART);
        let old = {
            let mut conns = self.conns.lock().unwrap();
            self.generation.send_modify(|g| *g += 1);
            std::mem::replace(&mut *conns, tokio::sync::watch::channel(()).0)
        };
        let _ = tokio::time::timeout(RESTART_WAIT, old.closed()).await;
    }

    /// What a new stdio connection holds: the guard a restart waits on, and
    /// a watch of the generation, seen as it is now.
    pub(crate) fn hold(
        &self,
    ) -> (
        tokio::sync::watch::Receiver<()>,
        tokio::sync::watch::Receiver<u64>,
    ) {
        let conns = self.conns.lock().unwrap();
        (conns.subscribe(), self.generation.subscribe())
    }

    /// A watch of the server generation, seen as it is now.
    pub(crate) fn generations(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// The server generation now (see [`Engine::restart`]).
    pub(crate) fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// Watches the count of `tools/call` requests.
    pub fn calls_watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.calls_tx.subscribe()
    }

    /// `tools/call` requests so far.
    pub fn tool_calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// What was recorded so far.
    pub fn recording(&self) -> McpRecording {
        let mut rec = self.rec.lock().unwrap().rec.clone();
        rec.rule_hits = self.hits.iter().map(|h| h.load(Ordering::SeqCst)).collect();
        if let Some(up) = &self.upstream {
            rec.upstream = Some(up.spec.describe());
            rec.upstream_error = up.failure();
        }
        rec
    }
}

/// A request's params, moved out of it with every string cut to
/// [`HELD_STRING`], and their recorded prefix (empty for none).
fn take_params(mut msg: Value) -> (Value, String) {
    let mut params = msg
        .as_object_mut()
        .and_then(|m| m.remove("params"))
        .unwrap_or(Value::Null);
    drop(msg);
    let text = if params.is_null() {
        String::new()
    } else {
        json_prefix(&params)
    };
    cut_strings(&mut params, HELD_STRING);
    (params, text)
}

/// The JSON text of `v`, cut to the recording's prefix without ever
/// writing it whole (a multi-MB argument is not copied to be cut).
fn json_prefix(v: &Value) -> String {
    /// A writer that keeps the first `cap` bytes, then refuses.
    struct Capped(Vec<u8>, usize);
    impl std::io::Write for Capped {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let room = self.1.saturating_sub(self.0.len());
            if room == 0 {
                return Err(std::io::Error::other("full"));
            }
            let n = room.min(b.len());
            self.0.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Up to 4 bytes a character, so the cut keeps PARAMS_KEEP characters.
    let mut w = Capped(Vec::new(), super::record::PARAMS_KEEP * 4 + 4);
    let _ = serde_json::to_writer(&mut w, v);
    prefix(&String::from_utf8_lossy(&w.0))
}

/// Cut every string in `v` (keys excepted) to at most `max` bytes, on a
/// character boundary, freeing the rest.
fn cut_strings(v: &mut Value, max: usize) {
    match v {
        Value::String(s) if s.len() > max => {
            let cut = (0..=max)
                .rev()
                .find(|&i| s.is_char_boundary(i))
                .unwrap_or(0);
            s.truncate(cut);
            s.shrink_to_fit();
        }
        Value::Array(a) => a.iter_mut().for_each(|x| cut_strings(x, max)),
        Value::Object(m) => m.values_mut().for_each(|x| cut_strings(x, max)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(rules: &str) -> Engine {
        Engine::new(
            serde_yaml::from_str(rules).unwrap(),
            "N".into(),
            Instant::now(),
            false,
        )
    }

    #[tokio::test]
    async fn requests_notifications_and_garbage_are_recorded_and_classified() {
        let e = engine("- {when: {call: 1}, reply: {kind: hang}}\n");
        let call = |id: u64| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"probe","arguments":{{"text":"t"}}}}}}"#
            )
        };
        let Incoming::Request(j0) = e.receive("stdio#1", call(1).as_bytes()) else {
            panic!()
        };
        assert!(j0.reply.is_none() && j0.single_frame());
        let Incoming::Request(j1) = e.receive("stdio#1", call(2).as_bytes()) else {
            panic!()
        };
        assert_eq!(j1.reply.as_ref().unwrap().kind_name(), "hang");
        let cancel = br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"x"}}"#;
        assert!(matches!(e.receive("stdio#1", cancel), Incoming::Nothing));
        assert!(matches!(
            e.receive("stdio#1", b"{oops"),
            Incoming::Invalid(_)
        ));
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        e.play(j0, tx).await;
        assert!(matches!(rx.recv().await, Some(Out::Frame(_))));
        let rec = e.recording();
        let methods: Vec<&str> = rec.exchanges.iter().map(|x| x.method.as_str()).collect();
        assert_eq!(
            methods,
            [
                "tools/call",
                "tools/call",
                "notifications/cancelled",
                "<unparseable>"
            ]
        );
        assert_eq!(rec.exchanges[0].call_index, Some(0));
        assert!(rec.exchanges[0].answered.is_some() && rec.exchanges[1].answered.is_none());
        assert_eq!(rec.exchanges[1].kind.as_deref(), Some("hang"));
        assert_eq!(rec.exchanges[2].cancels, Some(json!(2)));
        assert_eq!((rec.tool_calls, rec.rule_hits.clone()), (2, vec![1]));
    }

    #[tokio::test]
    async fn a_huge_argument_is_held_cut_and_a_call_whose_client_left_ends() {
        let e = engine("- {when: {call: 0}, reply: {kind: hang}}\n");
        let big = "é".repeat(3 << 20);
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"probe","arguments":{{"text":"{big}"}}}}}}"#
        );
        let Incoming::Request(job) = e.receive("http:s", call.as_bytes()) else {
            panic!()
        };
        let held = job.ctx.text();
        assert!(held.len() <= HELD_STRING && held.len() > HELD_STRING - 4);
        assert!(held.chars().all(|c| c == 'é'));
        let rec = e.recording();
        assert!(rec.exchanges[0]
            .params
            .starts_with(r#"{"arguments":{"text":"éé"#));
        assert!(rec.exchanges[0].params.chars().count() <= super::super::record::PARAMS_KEEP + 1);
        // A hung call ends once its sink's receiver is gone (client left).
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let playing = e.play(job, tx);
        drop(rx);
        tokio::time::timeout(std::time::Duration::from_secs(5), playing)
            .await
            .expect("the call ended with its client");
        assert!(e.recording().exchanges[0].answered.is_none());
    }
}
