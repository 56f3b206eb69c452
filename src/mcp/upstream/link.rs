//! One relay session to the real server, for one agent connection (a stdio
//! connection or an HTTP session): the agent's requests go up under fresh
//! numeric ids (mapped back when the answer arrives, and in a
//! `notifications/cancelled`), its notifications and responses go up as
//! they are, and what the server sends on its own (notifications, its
//! requests to the client) goes to the connection's sink. The carrier is the
//! child's stdin/stdout ([`Carrier::Stdio`]) or one POST per message to a
//! Streamable HTTP endpoint ([`Carrier::Http`], answered as JSON or SSE).
//!
//! Bounded: a frame from the server is at most [`MAX_FRAME`] bytes (a longer
//! one is skipped and counted), at most [`QUEUE`] frames wait to be written
//! (a client flooding past it gets an error answer, its notifications are
//! dropped and counted), and a link holds only its requests in flight.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::child::Child;
use crate::mcp::replies::{Frame, Out, Tx};

/// Largest frame read from the server.
pub const MAX_FRAME: usize = crate::mcp::stdio::MAX_LINE;
/// Frames waiting to be written to the server.
pub const QUEUE: usize = 256;

/// How frames reach the server.
pub enum Carrier {
    Stdio {
        queue: mpsc::Sender<Vec<u8>>,
        child: Mutex<Option<Child>>,
        tail: super::child::Tail,
    },
    Http {
        client: reqwest::Client,
        url: String,
        session: Mutex<Option<String>>,
        /// Fires when the last post got its response headers (see
        /// [`super::http::post`]).
        turn: Mutex<Option<oneshot::Receiver<()>>>,
    },
    /// It could not be started: every request gets the reason.
    Dead,
}

/// The HTTP carrier's client, URL, session id and ordering turn.
pub(super) type HttpParts<'a> = (
    &'a reqwest::Client,
    &'a str,
    &'a Mutex<Option<String>>,
    &'a Mutex<Option<oneshot::Receiver<()>>>,
);

/// One agent connection's session with the real server.
pub struct Link {
    /// How the server is named in messages.
    pub what: String,
    carrier: Carrier,
    pending: Mutex<HashMap<u64, oneshot::Sender<Value>>>,
    /// The agent's request id (its JSON text) → the upstream id, while in flight.
    by_agent: Mutex<HashMap<String, u64>>,
    next: AtomicU64,
    sink: Option<Tx>,
    closing: AtomicBool,
    closed: CancellationToken,
    reason: Mutex<Option<String>>,
    /// Where a failure of the server is reported (the scenario's slot).
    failure: Arc<dyn Fn(String) + Send + Sync>,
    /// Frames not delivered: too long, unparseable, or nowhere to go.
    pub dropped: AtomicU64,
}

/// A request sent up, waiting for its answer.
pub struct Pending {
    rx: oneshot::Receiver<Value>,
    link: Arc<Link>,
    /// The agent's id (JSON text) and the upstream's, to forget the mapping.
    ids: Option<(String, u64)>,
}

impl Link {
    /// A link over `carrier`; `sink` takes what the server sends on its own.
    pub fn new(
        what: String,
        carrier: Carrier,
        sink: Option<Tx>,
        failure: Arc<dyn Fn(String) + Send + Sync>,
    ) -> Arc<Link> {
        Arc::new(Link {
            what,
            carrier,
            pending: Mutex::default(),
            by_agent: Mutex::default(),
            next: AtomicU64::new(1),
            sink,
            closing: AtomicBool::new(false),
            closed: CancellationToken::new(),
            reason: Mutex::default(),
            failure,
            dropped: AtomicU64::new(0),
        })
    }

    /// A link that could not be started, for `reason`.
    pub fn dead(
        what: String,
        reason: String,
        failure: Arc<dyn Fn(String) + Send + Sync>,
    ) -> Arc<Link> {
        let l = Link::new(what, Carrier::Dead, None, failure);
        l.die(reason);
        l
    }

    /// Start relaying a stdio child: its stdout read here, its stdin fed
    /// from the queue.
    pub fn start_stdio(
        self: &Arc<Self>,
        stdin: tokio::process::ChildStdin,
        stdout: tokio::process::ChildStdout,
        rx: mpsc::Receiver<Vec<u8>>,
    ) {
        tokio::spawn(write_stdin(stdin, rx, self.closed.clone()));
        let me = self.clone();
        tokio::spawn(async move {
            me.read_stdout(stdout).await;
            let status = me.take_child_and_kill().await;
            if !me.closing.load(Ordering::SeqCst) {
                let (st, tail) = status;
                me.die(format!(
                    "upstream MCP server {} exited ({}); its stderr ends: {}",
                    me.what,
                    st.map_or("status unknown".into(), |s| s.to_string()),
                    tail
                ));
            }
        });
    }

    async fn read_stdout(&self, stdout: tokio::process::ChildStdout) {
        let mut r = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            let mut limited = (&mut r).take(MAX_FRAME as u64 + 1);
            let read = tokio::select! {
                _ = self.closed.cancelled() => return,
                n = limited.read_until(b'\n', &mut line) => n,
            };
            match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.len() > MAX_FRAME && !line.ends_with(b"\n") {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                if !skip_line(&mut r).await {
                    return;
                }
                continue;
            }
            let text = line.trim_ascii();
            if !text.is_empty() {
                self.dispatch(text).await;
            }
        }
    }

    async fn take_child_and_kill(&self) -> (Option<std::process::ExitStatus>, String) {
        let child = match &self.carrier {
            Carrier::Stdio { child, .. } => child.lock().unwrap().take(),
            _ => None,
        };
        match child {
            Some(c) => {
                let tail = c.tail.clone();
                let st = c.kill().await;
                (st, tail.text())
            }
            None => (None, String::new()),
        }
    }

    /// The link is unusable: every waiting request gets an error; unless
    /// chaosrun closed it, the failure is reported.
    fn die(&self, reason: String) {
        self.reason.lock().unwrap().get_or_insert(reason.clone());
        self.pending.lock().unwrap().clear();
        if !self.closing.load(Ordering::SeqCst) {
            (self.failure)(reason);
        }
        self.closed.cancel();
    }

    fn reason(&self) -> String {
        self.reason
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| format!("the relay to {} was closed", self.what))
    }

    /// One frame from the server: an answer to a waiting request, or a
    /// message of its own for the agent.
    async fn dispatch(&self, bytes: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if v.get("method").is_some() {
            match &self.sink {
                Some(tx) => {
                    let _ = tx.send(Out::Frame(Frame::Bytes(bytes.to_vec()))).await;
                }
                None => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            return;
        }
        let waiter = v
            .get("id")
            .and_then(Value::as_u64)
            .and_then(|id| self.pending.lock().unwrap().remove(&id));
        match waiter {
            Some(w) => {
                let _ = w.send(v);
            }
            None => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Send `msg` (a request of the agent) up under a fresh id.
    pub fn request(self: &Arc<Self>, mut msg: Value) -> Pending {
        let (tx, rx) = oneshot::channel();
        let mut pending = Pending {
            rx,
            link: self.clone(),
            ids: None,
        };
        if self.closed.is_cancelled() {
            return pending;
        }
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let agent_id = msg.get("id").map(Value::to_string).unwrap_or_default();
        msg["id"] = json!(id);
        self.pending.lock().unwrap().insert(id, tx);
        self.by_agent.lock().unwrap().insert(agent_id.clone(), id);
        pending.ids = Some((agent_id, id));
        if !self.send(msg, Some(id)) {
            // Dropping its sender answers the waiter with the reason.
            self.pending.lock().unwrap().remove(&id);
        }
        pending
    }

    /// Send a notification or a response of the agent up (a cancellation
    /// names the upstream id of the request it cancels).
    pub fn forward(self: &Arc<Self>, mut msg: Value) {
        if msg.get("method").and_then(Value::as_str) == Some("notifications/cancelled") {
            let named = msg.pointer("/params/requestId").map(Value::to_string);
            let up = named.and_then(|n| self.by_agent.lock().unwrap().get(&n).copied());
            match up {
                Some(id) => msg["params"]["requestId"] = json!(id),
                // Its request already ended (or never went up): nothing to cancel.
                None => return,
            }
        }
        self.send(msg, None);
    }

    /// Queue `msg` for the server; false when it cannot go.
    fn send(self: &Arc<Self>, msg: Value, id: Option<u64>) -> bool {
        match &self.carrier {
            Carrier::Stdio { queue, .. } => {
                let ok = serde_json::to_vec(&msg).is_ok_and(|b| queue.try_send(b).is_ok());
                if !ok {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
                ok
            }
            Carrier::Http { .. } => {
                super::http::post(self, msg, id);
                true
            }
            Carrier::Dead => false,
        }
    }

    /// The HTTP carrier's parts.
    pub(super) fn http(&self) -> Option<HttpParts<'_>> {
        match &self.carrier {
            Carrier::Http {
                client,
                url,
                session,
                turn,
            } => Some((client, url, session, turn)),
            _ => None,
        }
    }

    /// An answer arrived over HTTP (or failed): hand it to its waiter.
    pub(super) async fn deliver(&self, bytes: &[u8]) {
        self.dispatch(bytes).await;
    }

    /// Fail one request with a JSON-RPC error saying why.
    pub(super) fn fail_request(&self, id: u64, why: String) {
        if let Some(w) = self.pending.lock().unwrap().remove(&id) {
            let _ = w.send(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32603, "message": why}}));
        }
    }

    /// Report a failure of the server that leaves the link usable.
    pub(super) fn report(&self, reason: String) {
        if !self.closing.load(Ordering::SeqCst) {
            (self.failure)(reason);
        }
    }

    /// The tail of the child's stderr (stdio only).
    pub fn stderr_tail(&self) -> Option<String> {
        match &self.carrier {
            Carrier::Stdio { tail, .. } => Some(tail.text()),
            _ => None,
        }
    }

    /// Fires once the link is closed or dead.
    pub fn closed(&self) -> &CancellationToken {
        &self.closed
    }

    /// Close the link: the child killed (its whole group) and reaped, or the
    /// HTTP session deleted.
    pub async fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.closed.cancel();
        self.pending.lock().unwrap().clear();
        self.take_child_and_kill().await;
        super::http::delete(self).await;
    }
}

impl Pending {
    /// The server's answer (its id still the upstream's), or why none came:
    /// the link died or closed, `bound` passed, or `cancel` fired.
    pub async fn wait(
        self,
        bound: Option<Duration>,
        cancel: &CancellationToken,
    ) -> Result<Value, String> {
        let link = self.link;
        let bound = bound.unwrap_or(Duration::from_secs_f64(crate::units::MAX_SECONDS));
        let out = tokio::select! {
            a = self.rx => a.map_err(|_| link.reason()),
            _ = tokio::time::sleep(bound) => Err(format!(
                "upstream MCP server {} did not answer within {} s",
                link.what,
                crate::units::short(bound.as_secs_f64())
            )),
            _ = cancel.cancelled() => Err("the scenario ended".into()),
        };
        if let Some((agent, id)) = self.ids {
            link.pending.lock().unwrap().remove(&id);
            let mut m = link.by_agent.lock().unwrap();
            if m.get(&agent) == Some(&id) {
                m.remove(&agent);
            }
        }
        out
    }
}

/// Skip the rest of an oversize line; false at end of input.
async fn skip_line(r: &mut (impl AsyncBufReadExt + Unpin)) -> bool {
    let mut sink = Vec::new();
    loop {
        sink.clear();
        match r.take(64 * 1024).read_until(b'\n', &mut sink).await {
            Ok(0) | Err(_) => return false,
            Ok(_) if sink.ends_with(b"\n") => return true,
            Ok(_) => {}
        }
    }
}

/// Write queued frames to the child's stdin, one per line.
async fn write_stdin(
    mut stdin: tokio::process::ChildStdin,
    mut rx: mpsc::Receiver<Vec<u8>>,
    closed: CancellationToken,
) {
    loop {
        let frame = tokio::select! {
            _ = closed.cancelled() => return,
            f = rx.recv() => match f { Some(f) => f, None => return },
        };
        if stdin.write_all(&frame).await.is_err() || stdin.write_all(b"\n").await.is_err() {
            return;
        }
        let _ = stdin.flush().await;
    }
}
