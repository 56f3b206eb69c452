//! MCP reply kinds: one small type per file implementing [`McpReply`]
//! (answer a request frame), registered once in [`Reply`].
//! A reply decides *what* the server sends for one request and *when*
//! (frames, waits, a crash); the transport ([`super::stdio`], [`super::http`])
//! decides the bytes around each frame (a newline on stdio, an SSE event or a
//! JSON body over HTTP). Each kind's file says its behaviour in its doc comment
//! and carries its own test.
//!
//! The YAML form is internally tagged: `{kind: hang}`. An unknown kind is
//! rejected with the list of known kinds, derived from the one registry list.

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

crate::kinds::registry! {
    /// A reply to one MCP request: `{kind: NAME, ...fields}`.
    "MCP reply", Reply: dyn McpReply {
        Result(result::ResultReply),
        JsonrpcError(jsonrpc_error::JsonrpcError),
        Hang(hang::Hang),
        Slow(slow::Slow),
        ProgressForever(progress_forever::ProgressForever),
        Crash(crash::Crash),
        Malformed(malformed::Malformed),
        Huge(huge::Huge),
        ListHang(list_hang::ListHang),
        ListChangedStorm(list_changed_storm::ListChangedStorm),
        Unauthorized(unauthorized::Unauthorized),
        SchemaSwap(schema_swap::SchemaSwap),
    }
}

/// Every MCP reply kind's name, in registry order (the docs' list of kinds).
pub fn kind_names() -> &'static [&'static str] {
    Reply::KINDS
}

/// A reply answering, to its end: whether the request got its final answer.
pub type Answering<'a> = futures_util::future::BoxFuture<'a, bool>;

/// What an MCP reply kind does: answer one request frame.
pub(crate) trait McpReply: Send + Sync {
    /// Send the reply's frames to `tx` (waits and a crash included). True
    /// when the request got its final answer (a result or an error frame).
    fn answer<'a>(&'a self, ctx: &'a Ctx, tx: &'a Tx) -> Answering<'a>;

    /// Whether the reply is one frame sent at once (HTTP answers it as a JSON
    /// body; every other kind as an SSE stream).
    fn single_frame(&self) -> bool {
        false
    }

    /// What is wrong with this reply for requests of `method`, if anything
    /// (checked at load).
    fn check(&self, _method: &str) -> Result<(), String> {
        Ok(())
    }

    /// Over HTTP, a refusal instead of any frame: the 401 body (the
    /// transport adds the challenge and keeps no session); `None` answers.
    fn http_refusal(&self, _ctx: &Ctx) -> Option<String> {
        None
    }

    /// Refuses the client's credentials (the oracle bounds such requests).
    fn refuses(&self) -> bool {
        false
    }

    /// Changes chaosrun's own probe tool, so it cannot apply to a real
    /// server (and the oracle looks for the agent's re-listing).
    fn changes_probe_tool(&self) -> bool {
        false
    }
}

/// One frame the server sends: a whole message, or a huge one produced in
/// chunks as it is written (never held whole in memory).
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Bytes(Vec<u8>),
    /// `head`, then `fill` bytes of `x`, then `tail`.
    Huge {
        head: Vec<u8>,
        fill: usize,
        tail: Vec<u8>,
    },
}

impl Frame {
    pub fn json(v: &Value) -> Frame {
        Frame::Bytes(serde_json::to_vec(v).unwrap_or_default())
    }

    /// The frame's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Frame::Bytes(b) => b.len(),
            Frame::Huge { head, fill, tail } => head.len() + fill + tail.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `[at, at + max)` of the frame (a huge frame's fill is made
    /// here, piece by piece).
    pub fn piece(&self, at: usize, max: usize) -> Vec<u8> {
        let end = at.saturating_add(max).min(self.len());
        let (head, fill, tail): (&[u8], usize, &[u8]) = match self {
            Frame::Bytes(b) => (b, 0, &[]),
            Frame::Huge { head, fill, tail } => (head, *fill, tail),
        };
        let mut out = Vec::with_capacity(end.saturating_sub(at));
        // The three parts as ranges of the frame, each copied where it overlaps.
        let h = head.len();
        let parts: [(usize, usize); 3] = [(0, h), (h, h + fill), (h + fill, h + fill + tail.len())];
        for (n, (from, to)) in parts.into_iter().enumerate() {
            let (lo, hi) = (at.max(from), end.min(to));
            if lo >= hi {
                continue;
            }
            match n {
                0 => out.extend_from_slice(&head[lo..hi]),
                1 => out.resize(out.len() + (hi - lo), b'x'),
                _ => out.extend_from_slice(&tail[lo - from..hi - from]),
            }
        }
        out
    }

    /// The frame's bytes in chunks of at most `chunk` bytes, made lazily.
    pub fn chunks(&self, chunk: usize) -> impl Iterator<Item = Vec<u8>> + '_ {
        let chunk = chunk.max(1);
        (0..self.len().div_ceil(chunk)).map(move |i| self.piece(i * chunk, chunk))
    }
}

/// What a reply hands its transport.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// Send this frame (a notification, or the request's answer).
    Frame(Frame),
    /// The server dies: the stdio shim exits(1); HTTP resets the connection.
    Crash,
}

/// What a reply knows about the request it answers.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The request's JSON-RPC id.
    pub id: Value,
    pub method: String,
    /// The request's params (`null` when none).
    pub params: Value,
    /// Substituted for `{{nonce}}`.
    pub nonce: String,
    /// Fires when the server shuts down (every wait ends then).
    pub cancel: CancellationToken,
    /// Whether a `schema_swap` changed the probe tool's schema (shared by
    /// every request of the scenario's server).
    pub swapped: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Proxy mode: the real server's answer, which stands for the healthy one.
    pub relayed: Option<Frame>,
}

impl Ctx {
    /// The probe tool's `text` argument (empty when absent); after a
    /// `schema_swap`, its `query` argument.
    pub fn text(&self) -> String {
        let arg = if self.is_swapped() {
            "/arguments/query"
        } else {
            "/arguments/text"
        };
        self.params
            .pointer(arg)
            .map(|t| match t {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default()
    }

    /// Whether the probe tool's schema was swapped.
    pub fn is_swapped(&self) -> bool {
        self.swapped.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `params._meta.progressToken`, if the client sent one.
    pub fn progress_token(&self) -> Option<Value> {
        self.params.pointer("/_meta/progressToken").cloned()
    }

    /// `{{nonce}}` and `{{text}}` rendered in a scripted text.
    pub fn render(&self, s: &str) -> String {
        s.replace("{{nonce}}", &self.nonce)
            .replace("{{text}}", &self.text())
    }

    /// `{"jsonrpc":"2.0","id":…,"result":…}`.
    pub fn answer(&self, result: Value) -> Frame {
        Frame::json(&serde_json::json!({"jsonrpc": "2.0", "id": self.id, "result": result}))
    }

    /// The healthy answer to this request (see [`super::jsonrpc::healthy`]);
    /// in proxy mode, the real server's answer.
    pub fn healthy(&self) -> Frame {
        match &self.relayed {
            Some(f) => f.clone(),
            None => super::jsonrpc::healthy(self),
        }
    }
}

/// Where a reply sends; a closed transport makes every send a no-op.
pub type Tx = mpsc::Sender<Out>;

/// Send, ignoring a transport that went away (the client disconnected).
pub(crate) async fn send(tx: &Tx, out: Out) -> bool {
    tx.send(out).await.is_ok()
}

/// Wait `secs` seconds, or less when the server shuts down. True when the
/// full time passed.
pub(crate) async fn wait(secs: f64, cancel: &CancellationToken) -> bool {
    let d = std::time::Duration::from_secs_f64(secs.clamp(0.0, crate::units::MAX_SECONDS));
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = cancel.cancelled() => false,
    }
}

impl Reply {
    /// Whether the reply is one frame sent at once (HTTP answers it as a JSON
    /// body; every other kind as an SSE stream).
    pub fn single_frame(&self) -> bool {
        self.as_dyn().single_frame()
    }

    /// What is wrong with this reply for requests of `method`, if anything
    /// (checked at load).
    pub fn check(&self, method: &str) -> Result<(), String> {
        self.as_dyn().check(method)
    }

    /// Over HTTP, the 401 body that refuses the request, if it is refused.
    pub fn http_refusal(&self, ctx: &Ctx) -> Option<String> {
        self.as_dyn().http_refusal(ctx)
    }

    /// Refuses the client's credentials.
    pub fn refuses(&self) -> bool {
        self.as_dyn().refuses()
    }

    /// Changes chaosrun's own probe tool.
    pub fn changes_probe_tool(&self) -> bool {
        self.as_dyn().changes_probe_tool()
    }

    /// Whether the kind recorded as `name` withholds the discovery answer.
    pub fn withholds_listing(name: &str) -> bool {
        Self::facts_of(name).is_some_and(|f| f.withholds_listing)
    }

    /// Whether, with the kind recorded as `name`, the server itself ended
    /// the call (a crash, a malformed answer): no cancel is owed for it.
    pub fn ends_call(name: &str) -> bool {
        Self::facts_of(name).is_some_and(|f| f.ends_call)
    }

    /// Play the reply: send its frames to `tx`. Returns whether the request
    /// got its final answer (a result or an error frame).
    pub async fn play(&self, ctx: &Ctx, tx: &Tx) -> bool {
        self.as_dyn().answer(ctx, tx).await
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub fn ctx(method: &str, params: Value) -> Ctx {
        Ctx {
            id: serde_json::json!(7),
            method: method.into(),
            params,
            nonce: "N0NCE".into(),
            cancel: CancellationToken::new(),
            swapped: Default::default(),
            relayed: None,
        }
    }

    pub fn call(text: &str) -> Ctx {
        ctx(
            "tools/call",
            serde_json::json!({"name": "probe", "arguments": {"text": text}, "_meta": {"progressToken": "tok"}}),
        )
    }

    /// Play `r` to the end (or for `ms` milliseconds), collecting what it sent.
    pub async fn collect(r: &Reply, ctx: &Ctx, ms: u64) -> (Vec<Out>, Option<bool>) {
        let (tx, mut rx) = mpsc::channel(1 << 16);
        let done = tokio::time::timeout(std::time::Duration::from_millis(ms), r.play(ctx, &tx))
            .await
            .ok();
        drop(tx);
        let mut outs = Vec::new();
        while let Some(o) = rx.recv().await {
            outs.push(o);
        }
        (outs, done)
    }

    pub fn json(o: &Out) -> Value {
        match o {
            Out::Frame(Frame::Bytes(b)) => serde_json::from_slice(b).unwrap(),
            other => panic!("not a small frame: {other:?}"),
        }
    }
}
