//! Streamable HTTP on loopback: one endpoint, `/mcp` (the legacy
//! transport's `/sse` and `/messages` share the listener: [`super::sse`]). `POST` carries one
//! JSON-RPC message: a notification or response gets 202; a request gets
//! one JSON body (`result`, `jsonrpc_error`, `malformed`, the healthy
//! answer) or an SSE stream (`event: message`, one frame per event) for
//! kinds that take time or send notifications first; `crash` cuts the
//! stream's connection. `initialize` issues an `Mcp-Session-Id`; every later
//! request must carry a live one (missing: 400, unknown or ended: 404).
//! `unauthorized` is a `401` with a `WWW-Authenticate` challenge and no
//! session. A restart ([`Engine::restart`]) forgets every session issued
//! before it (404, as a restarted server answers: the client must
//! initialize again); a request already in flight is answered. `DELETE` ends a session. `GET` (a server-initiated SSE stream) is 405:
//! this server sends notifications on the request's own stream.
//!
//! Memory: a session has at most [`MAX_IN_FLIGHT`] requests in flight; a
//! request past it waits with its body still unread (in the kernel's
//! buffers). At most [`READING`] bodies (each up to [`BODY_LIMIT`]) are read
//! and parsed at once over all sessions; a body is dropped once parsed. A
//! client that disconnects drops its handler and its answer stream, and the
//! call's job ends with them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;

use super::engine::{Engine, Incoming, MAX_IN_FLIGHT};
use super::replies::{Frame, Out};

/// Largest request body accepted.
pub(super) const BODY_LIMIT: usize = 8 << 20;
/// Bytes per body chunk of a huge frame.
const CHUNK: usize = 64 * 1024;
/// Sessions kept open at once.
pub(super) const MAX_SESSIONS: usize = 256;
const SESSION: &str = "mcp-session-id";
/// Request bodies read and parsed at once, over every session.
const READING: usize = 1;

/// A live session: the requests it may still have in flight.
type Slots = Arc<Semaphore>;

struct Http {
    engine: Arc<Engine>,
    /// Each session with the server generation that issued it: one issued
    /// before a restart ([`Engine::restart`]) is unknown (404).
    sessions: Mutex<HashMap<String, (u64, Slots)>>,
    reading: Semaphore,
}

/// Serve `/mcp` on 127.0.0.1 (a free port; through `bind` when given: a
/// scenario's network namespace) until the engine is cancelled.
pub async fn start(
    engine: Arc<Engine>,
    bind: Option<&crate::listen::Binder>,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = crate::listen::loopback(bind, 0).await?;
    let addr = listener.local_addr()?;
    let cancel = engine.cancel.clone();
    let engine_for_sse = engine.clone();
    let state = Arc::new(Http {
        engine,
        sessions: Mutex::new(HashMap::new()),
        reading: Semaphore::new(READING),
    });
    let app = Router::new()
        .route("/mcp", post(on_post).get(on_get).delete(on_delete))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
        .merge(super::sse::routes(engine_for_sse));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { cancel.cancelled().await })
            .await;
    });
    Ok((addr, task))
}

pub(super) fn status(code: StatusCode, text: &str) -> Response {
    let mut r = Response::new(Body::from(text.to_string()));
    *r.status_mut() = code;
    r
}

fn session_of(h: &HeaderMap) -> Option<String> {
    h.get(SESSION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn frame_bytes(f: &Frame) -> impl Iterator<Item = Bytes> + '_ {
    f.chunks(CHUNK).map(Bytes::from)
}

async fn on_get() -> Response {
    let mut r = status(
        StatusCode::METHOD_NOT_ALLOWED,
        "this server sends notifications on each request's SSE stream\n",
    );
    r.headers_mut()
        .insert("allow", HeaderValue::from_static("POST, DELETE"));
    r
}

async fn on_delete(State(s): State<Arc<Http>>, h: HeaderMap) -> Response {
    let Some(sid) = session_of(&h) else {
        return status(StatusCode::BAD_REQUEST, "missing Mcp-Session-Id\n");
    };
    if s.sessions.lock().unwrap().remove(&sid).is_none() {
        return status(StatusCode::NOT_FOUND, "unknown session\n");
    }
    s.engine.note(&format!("http:{sid}"), "<delete>");
    s.engine.detach(&format!("http:{sid}")).await;
    status(StatusCode::OK, "")
}

/// Whether `body` is an `initialize` request (read without copying it).
fn is_initialize(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Method>(body).is_ok_and(|m| m.method.as_deref() == Some("initialize"))
}

/// The session a request belongs to: a new one for `initialize`, else the
/// live one its header names.
fn session(
    s: &Http,
    h: &HeaderMap,
    init: bool,
) -> Result<(String, Slots), (StatusCode, &'static str)> {
    let now = s.engine.generation();
    let mut sessions = s.sessions.lock().unwrap();
    if init {
        if sessions.len() >= MAX_SESSIONS {
            return Err((StatusCode::SERVICE_UNAVAILABLE, "too many sessions\n"));
        }
        let sid = format!("{:032x}", rand::random::<u128>());
        let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        sessions.insert(sid.clone(), (now, slots.clone()));
        s.engine.note("", "http");
        return Ok((sid, slots));
    }
    match session_of(h) {
        None => Err((
            StatusCode::BAD_REQUEST,
            "missing Mcp-Session-Id (send initialize first)\n",
        )),
        Some(sid) => match sessions.get(&sid) {
            None => Err((StatusCode::NOT_FOUND, "unknown or ended session\n")),
            Some((issued, _)) if *issued < now => {
                sessions.remove(&sid);
                s.engine
                    .note(&format!("http:{sid}"), "<unknown session: restart>");
                Err((StatusCode::NOT_FOUND, "unknown or ended session\n"))
            }
            Some((_, slots)) => Ok((sid, slots.clone())),
        },
    }
}

async fn on_post(State(s): State<Arc<Http>>, h: HeaderMap, body: Body) -> Response {
    // A request naming a live session waits for one of its session's slots
    // before its body is read. Any other (`initialize`, or a stale or
    // missing header, refused below unless it is `initialize`) is read first.
    let held = match session(&s, &h, false) {
        Ok((sid, slots)) => slots.acquire_owned().await.ok().map(|p| (sid, p)),
        Err(_) => None,
    };
    let (incoming, sid, permit) = {
        let Ok(_reading) = s.reading.acquire().await else {
            return status(StatusCode::SERVICE_UNAVAILABLE, "");
        };
        let body = match axum::body::to_bytes(body, BODY_LIMIT).await {
            Ok(b) => b,
            Err(_) => {
                return status(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large or cut\n",
                )
            }
        };
        let (sid, permit) = match (held, is_initialize(&body)) {
            (Some((sid, p)), false) => (sid, p),
            (_, init) => match session(&s, &h, init) {
                Ok((sid, slots)) => match slots.try_acquire_owned() {
                    Ok(p) => (sid, p),
                    Err(_) => return status(StatusCode::SERVICE_UNAVAILABLE, "session busy\n"),
                },
                Err((code, text)) => return status(code, text),
            },
        };
        (s.engine.receive(&format!("http:{sid}"), &body), sid, permit)
    };
    let mut resp = match incoming {
        Incoming::Nothing => status(StatusCode::ACCEPTED, ""),
        Incoming::Invalid(f) => json_response(StatusCode::BAD_REQUEST, &f),
        Incoming::Request(job) => {
            if let Some(body) = job.reply.as_ref().and_then(|r| r.http_refusal(&job.ctx)) {
                // No session for a refused client (nor, in proxy mode, its
                // relay session upstream).
                s.sessions.lock().unwrap().remove(&sid);
                s.engine.detach(&format!("http:{sid}")).await;
                let mut r = status(StatusCode::UNAUTHORIZED, &body);
                let h = r.headers_mut();
                h.insert("content-type", HeaderValue::from_static("application/json"));
                h.insert(
                    "www-authenticate",
                    HeaderValue::from_static(super::replies::unauthorized::CHALLENGE),
                );
                return r;
            }
            let single = job.single_frame();
            let (tx, mut rx) = mpsc::channel::<Out>(64);
            let engine = s.engine.clone();
            tokio::spawn(async move {
                engine.play(job, tx).await;
                drop(permit);
            });
            if single {
                match rx.recv().await {
                    Some(Out::Frame(f)) => json_response(StatusCode::OK, &f),
                    _ => status(StatusCode::INTERNAL_SERVER_ERROR, ""),
                }
            } else {
                sse_response(rx)
            }
        }
    };
    if let Ok(v) = HeaderValue::from_str(&sid) {
        resp.headers_mut().insert(SESSION, v);
    }
    resp
}

fn json_response(code: StatusCode, f: &Frame) -> Response {
    let chunks: Vec<Result<Bytes, std::io::Error>> = frame_bytes(f).map(Ok).collect();
    let mut r = Response::new(Body::from_stream(futures_util::stream::iter(chunks)));
    *r.status_mut() = code;
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    r
}

fn cut() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "chaosrun: MCP server crash",
    )
}

/// An SSE body: each frame one `message` event, written chunk by chunk (a
/// huge frame is made piece by piece as the client reads); a crash cuts the
/// connection.
fn sse_response(rx: mpsc::Receiver<Out>) -> Response {
    sse_body(rx, None, None)
}

/// An SSE body as [`sse_response`], with `first` written before any frame
/// (the legacy transport's `endpoint` event), cut when `restart` changes
/// (the server restarted: the stream of a session it forgot ends).
pub(super) fn sse_body(
    rx: mpsc::Receiver<Out>,
    first: Option<Bytes>,
    restart: Option<tokio::sync::watch::Receiver<u64>>,
) -> Response {
    struct St {
        rx: mpsc::Receiver<Out>,
        /// The frame being written and how far.
        cur: Option<(Frame, usize)>,
        first: Option<Bytes>,
        restart: Option<tokio::sync::watch::Receiver<u64>>,
    }
    let st = St {
        rx,
        cur: None,
        first,
        restart,
    };
    let stream = futures_util::stream::unfold(Some(st), |state| async move {
        let mut st = state?;
        if let Some(b) = st.first.take() {
            return Some((Ok(b), Some(st)));
        }
        if let Some((f, at)) = st.cur.take() {
            if at >= f.len() {
                return Some((Ok(Bytes::from_static(b"\n\n")), Some(st)));
            }
            let b = Bytes::from(f.piece(at, CHUNK));
            st.cur = Some((f, at + CHUNK));
            return Some((Ok(b), Some(st)));
        }
        let restarted = async {
            match st.restart.as_mut() {
                Some(r) => {
                    let _ = r.changed().await;
                }
                None => std::future::pending().await,
            }
        };
        let out = tokio::select! {
            o = st.rx.recv() => o,
            () = restarted => Some(Out::Crash),
        };
        match out {
            None => None,
            Some(Out::Crash) => Some((Err(cut()), None)),
            Some(Out::Frame(f)) => {
                st.cur = Some((f, 0));
                Some((Ok(Bytes::from_static(b"event: message\ndata: ")), Some(st)))
            }
        }
    });
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// After a restart a session issued before it is unknown (404); a new
    /// `initialize` opens one that works.
    #[tokio::test]
    async fn a_restart_forgets_every_session() {
        let engine = Arc::new(Engine::new(
            Vec::new(),
            "N".into(),
            tokio::time::Instant::now(),
            false,
        ));
        let (addr, _task) = start(engine.clone(), None).await.unwrap();
        let url = format!("http://{addr}/mcp");
        let c = reqwest::Client::new();
        let post = |sid: Option<String>, body: Value| {
            let mut r = c
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .json(&body);
            if let Some(s) = sid {
                r = r.header(SESSION, s);
            }
            r.send()
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}});
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "probe", "arguments": {"text": "t"}}});
        let sid = |r: &reqwest::Response| r.headers()[SESSION].to_str().unwrap().to_string();
        let old = sid(&post(None, init.clone()).await.unwrap());
        assert_eq!(
            post(Some(old.clone()), call.clone())
                .await
                .unwrap()
                .status(),
            200
        );
        engine.restart().await;
        let refused = post(Some(old.clone()), call.clone()).await.unwrap();
        assert_eq!(refused.status(), 404);
        let new = sid(&post(None, init).await.unwrap());
        assert_ne!(new, old);
        let answered = post(Some(new), call).await.unwrap();
        assert_eq!(answered.status(), 200);
        let v: Value = answered.json().await.unwrap();
        assert_eq!(v["result"]["content"][0]["text"], "probe:t");
    }
}
