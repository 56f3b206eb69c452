//! The legacy HTTP+SSE transport (protocol 2024-11-05), on the Streamable
//! HTTP server's listener: `GET /sse` opens a session's event stream, whose
//! first event, `endpoint`, names where the client posts
//! (`/messages?session_id=ID`); each posted JSON-RPC message is answered
//! `202 Accepted` and its answer goes out on the stream as a `message`
//! event (an `unauthorized` reply is a `401` to the post instead). `crash`
//! cuts the stream. A restart ([`Engine::restart`]) cuts every stream
//! opened before it, and a post to a session that is gone (its stream
//! closed, or opened before a restart) is `404`. With `mcp.withhold_endpoint`
//! a stream opens and never sends its `endpoint` event (recorded as
//! [`WITHHELD`]): the client never learns where to post.
//!
//! Memory: each session's answers wait in a queue of [`QUEUE`] frames for
//! its stream (a client that never reads stalls its own jobs, not
//! chaosrun); at most [`MAX_IN_FLIGHT`] requests of a session are in
//! flight (a post past it is `503`); at most [`super::http::MAX_SESSIONS`]
//! sessions are open; bodies are read one at a time, each up to
//! [`super::http::BODY_LIMIT`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::{mpsc, Semaphore};

use super::engine::{Engine, Incoming, MAX_IN_FLIGHT};
use super::http::{sse_body, status, BODY_LIMIT, MAX_SESSIONS};
use super::replies::Out;

/// Frames queued per session before an answer waits for its stream.
const QUEUE: usize = 64;
/// The stream's path, and where the `endpoint` event sends posts.
pub const PATH: &str = "/sse";
const MESSAGES: &str = "/messages";
/// Recorded when a stream opens without its `endpoint` event
/// (`mcp.withhold_endpoint`).
pub const WITHHELD: &str = "<endpoint withheld>";

/// One open session: the server generation that opened it, its stream's
/// sender, and its requests' slots.
struct Session {
    generation: u64,
    tx: mpsc::Sender<Out>,
    slots: Arc<Semaphore>,
}

struct Sse {
    engine: Arc<Engine>,
    sessions: Mutex<HashMap<String, Session>>,
    reading: Semaphore,
}

/// The two routes, with their own state.
pub(super) fn routes(engine: Arc<Engine>) -> Router {
    let state = Arc::new(Sse {
        engine,
        sessions: Mutex::new(HashMap::new()),
        reading: Semaphore::new(1),
    });
    Router::new()
        .route(PATH, get(on_get))
        .route(MESSAGES, post(on_post))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Open a session: its stream, which first names the post endpoint.
async fn on_get(State(s): State<Arc<Sse>>) -> Response {
    let (tx, rx) = mpsc::channel(QUEUE);
    let sid = format!("{:032x}", rand::random::<u128>());
    let restart = s.engine.generations();
    {
        let mut sessions = s.sessions.lock().unwrap();
        sessions.retain(|_, v| !v.tx.is_closed());
        if sessions.len() >= MAX_SESSIONS {
            return status(StatusCode::SERVICE_UNAVAILABLE, "too many sessions\n");
        }
        let session = Session {
            generation: *restart.borrow(),
            tx,
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        };
        sessions.insert(sid.clone(), session);
    }
    s.engine.note("", "sse");
    if s.engine.withhold_endpoint {
        s.engine.note(&format!("sse:{sid}"), WITHHELD);
        return sse_body(rx, None, Some(restart));
    }
    let first = format!("event: endpoint\ndata: {MESSAGES}?session_id={sid}\n\n");
    sse_body(rx, Some(Bytes::from(first)), Some(restart))
}

/// The `session_id` of a post's query (the ids this server issues need no
/// decoding).
fn session_id(uri: &Uri) -> Option<&str> {
    uri.query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("session_id="))
        .filter(|v| !v.is_empty())
}

/// The live session `sid` names: its sender and slots, or why not (a 404).
fn session(s: &Sse, sid: &str) -> Result<(mpsc::Sender<Out>, Arc<Semaphore>), &'static str> {
    let now = s.engine.generation();
    let mut sessions = s.sessions.lock().unwrap();
    let gone = match sessions.get(sid) {
        None => return Err("unknown session\n"),
        Some(v) if v.generation < now => "unknown session (the server restarted)\n",
        Some(v) if v.tx.is_closed() => "the session's stream is closed\n",
        Some(v) => return Ok((v.tx.clone(), v.slots.clone())),
    };
    sessions.remove(sid);
    s.engine.note(&format!("sse:{sid}"), "<unknown session>");
    Err(gone)
}

/// A posted message: recorded and answered on the session's stream.
async fn on_post(State(s): State<Arc<Sse>>, uri: Uri, body: Body) -> Response {
    let Some(sid) = session_id(&uri) else {
        return status(StatusCode::BAD_REQUEST, "missing session_id\n");
    };
    let (tx, slots) = match session(&s, sid) {
        Ok(v) => v,
        Err(why) => return status(StatusCode::NOT_FOUND, why),
    };
    let Ok(permit) = slots.try_acquire_owned() else {
        return status(StatusCode::SERVICE_UNAVAILABLE, "session busy\n");
    };
    let incoming = {
        let Ok(_reading) = s.reading.acquire().await else {
            return status(StatusCode::SERVICE_UNAVAILABLE, "");
        };
        let Ok(body) = axum::body::to_bytes(body, BODY_LIMIT).await else {
            return status(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large or cut\n",
            );
        };
        s.engine.receive(&format!("sse:{sid}"), &body)
    };
    match incoming {
        Incoming::Nothing => {}
        Incoming::Invalid(f) => {
            let _ = tx.send(Out::Frame(f)).await;
        }
        Incoming::Request(job) => {
            if let Some(body) = job.reply.as_ref().and_then(|r| r.http_refusal(&job.ctx)) {
                let mut r = status(StatusCode::UNAUTHORIZED, &body);
                r.headers_mut().insert(
                    "www-authenticate",
                    HeaderValue::from_static(super::replies::unauthorized::CHALLENGE),
                );
                return r;
            }
            let engine = s.engine.clone();
            tokio::spawn(async move {
                engine.play(job, tx).await;
                drop(permit);
            });
        }
    }
    status(StatusCode::ACCEPTED, "Accepted")
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use serde_json::{json, Value};

    /// The stream's next event as (name, data).
    async fn event(
        s: &mut (impl futures_util::Stream<Item = reqwest::Result<Bytes>> + Unpin),
        buf: &mut Vec<u8>,
    ) -> Option<(String, String)> {
        loop {
            if let Some(i) = buf.windows(2).position(|w| w == b"\n\n") {
                let ev: Vec<u8> = buf.drain(..i + 2).collect();
                let text = String::from_utf8_lossy(&ev).to_string();
                let field = |k: &str| {
                    text.lines()
                        .find_map(|l| l.strip_prefix(k))
                        .unwrap_or_default()
                        .to_string()
                };
                return Some((field("event: "), field("data: ")));
            }
            match s.next().await {
                Some(Ok(b)) => buf.extend_from_slice(&b),
                _ => return None,
            }
        }
    }

    /// A session end to end: the endpoint event, a post answered 202 and
    /// its answer on the stream; after a restart the stream is cut and a
    /// post to the old session is 404.
    #[tokio::test]
    async fn a_session_posts_and_reads_its_answers_on_the_stream() {
        let engine = Arc::new(Engine::new(
            Vec::new(),
            "N".into(),
            tokio::time::Instant::now(),
            false,
        ));
        let (addr, _task) = super::super::http::start(engine.clone(), None)
            .await
            .unwrap();
        let c = reqwest::Client::new();
        let resp = c.get(format!("http://{addr}{PATH}")).send().await.unwrap();
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let mut stream = resp.bytes_stream();
        let mut buf = Vec::new();
        let (name, endpoint) = event(&mut stream, &mut buf).await.unwrap();
        assert_eq!(name, "endpoint");
        assert!(endpoint.starts_with("/messages?session_id="), "{endpoint}");
        let post_url = format!("http://{addr}{endpoint}");
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "probe", "arguments": {"text": "t"}}});
        let posted = c.post(&post_url).json(&call).send().await.unwrap();
        assert_eq!(posted.status(), 202);
        let (name, data) = event(&mut stream, &mut buf).await.unwrap();
        assert_eq!(name, "message");
        let v: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(
            (v["id"].clone(), v["result"]["content"][0]["text"].clone()),
            (json!(1), json!("probe:t"))
        );
        engine.restart().await;
        assert_eq!(event(&mut stream, &mut buf).await, None);
        let refused = c.post(&post_url).json(&call).send().await.unwrap();
        assert_eq!(refused.status(), 404);
        let missing = c
            .post(format!("http://{addr}{MESSAGES}"))
            .json(&call)
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status(), 400);
        let rec = engine.recording();
        assert_eq!(rec.sse_sessions, 1);
        assert_eq!(
            rec.exchanges[0].conn,
            endpoint.replace("/messages?session_id=", "sse:")
        );
    }
}
