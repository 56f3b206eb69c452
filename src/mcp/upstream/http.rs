//! The Streamable HTTP carrier of a [`Link`]: each message is one POST to
//! the server's endpoint (`Accept: application/json, text/event-stream`),
//! carrying the `Mcp-Session-Id` the server issued at `initialize`; the
//! answer is a JSON body or an SSE stream whose `data:` events are frames
//! (notifications and server requests on it go to the agent's sink). A
//! refused or failed POST answers its request with a JSON-RPC error naming
//! the status; closing the link DELETEs the session. Bodies and events are
//! cut at [`super::link::MAX_FRAME`] bytes.

use std::sync::Arc;

use futures_util::StreamExt;
use serde_json::Value;

use super::link::{Link, MAX_FRAME};

/// How long a POST waits for the previous one's response headers before it
/// goes anyway (a server that answers JSON only when done).
const TURN: std::time::Duration = std::time::Duration::from_secs(2);

/// POST `msg` (request `id`, if one) and deliver what comes back. Posts go
/// out in the order they were made: each waits for its predecessor's
/// response headers (at most [`TURN`]), so the server gets
/// `notifications/initialized` before the next request, and the session id
/// issued at `initialize` before anything else.
pub(super) fn post(link: &Arc<Link>, msg: Value, id: Option<u64>) {
    let Some((_, _, _, turn)) = link.http() else {
        return;
    };
    let (done, next) = tokio::sync::oneshot::channel();
    let prev = turn.lock().unwrap().replace(next);
    // A post ends with the link's closing.
    let link = link.clone();
    let closed = link.closed().clone();
    tokio::spawn(async move {
        if let Some(prev) = prev {
            let _ = tokio::time::timeout(TURN, prev).await;
        }
        let Some((client, url, session, _)) = link.http() else {
            return;
        };
        let mut req = client
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .json(&msg);
        if let Some(s) = session.lock().unwrap().clone() {
            req = req.header("mcp-session-id", s);
        }
        tokio::select! {
            _ = closed.cancelled() => {}
            _ = exchange(&link, req, id, done) => {}
        }
    });
}

async fn exchange(
    link: &Link,
    req: reqwest::RequestBuilder,
    id: Option<u64>,
    done: tokio::sync::oneshot::Sender<()>,
) {
    let sent = req.send().await;
    if let Ok(r) = &sent {
        if let Some(s) = r
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            if let Some((_, _, session, _)) = link.http() {
                *session.lock().unwrap() = Some(s.to_string());
            }
        }
    }
    // The next post may go (its session header is known by now).
    let _ = done.send(());
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            let why = format!("upstream MCP server {} unreachable: {e}", link.what);
            link.report(why.clone());
            if let Some(id) = id {
                link.fail_request(id, why);
            }
            return;
        }
    };
    let status = resp.status();
    if !status.is_success() {
        if let Some(id) = id {
            link.fail_request(
                id,
                format!("upstream MCP server {} answered HTTP {status}", link.what),
            );
        }
        return;
    }
    let sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(Ok(chunk)) = body.next().await {
        buf.extend_from_slice(&chunk);
        if sse {
            for event in take_events(&mut buf) {
                link.deliver(&event).await;
            }
        }
        if buf.len() > MAX_FRAME {
            link.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
    }
    if !sse && !buf.trim_ascii().is_empty() {
        link.deliver(&buf).await;
    }
    if let Some(id) = id {
        // The stream ended without its answer.
        link.fail_request(
            id,
            format!(
                "upstream MCP server {} ended its answer stream without a result",
                link.what
            ),
        );
    }
}

/// The complete SSE events at the front of `buf` (their `data:` lines
/// joined), removed from it.
fn take_events(buf: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let text = &buf[..];
        let end = text
            .windows(2)
            .position(|w| w == b"\n\n")
            .map(|p| (p, 2))
            .or_else(|| {
                text.windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .map(|p| (p, 4))
            });
        let Some((at, sep)) = end else {
            return out;
        };
        let mut data = Vec::new();
        for line in buf[..at].split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(d) = line.strip_prefix(b"data:") {
                if !data.is_empty() {
                    data.push(b'\n');
                }
                data.extend_from_slice(d.strip_prefix(b" ").unwrap_or(d));
            }
        }
        buf.drain(..at + sep);
        if !data.is_empty() {
            out.push(data);
        }
    }
}

/// End the link's HTTP session, if it has one (bounded).
pub(super) async fn delete(link: &Link) {
    let Some((client, url, session, _)) = link.http() else {
        return;
    };
    let Some(s) = session.lock().unwrap().take() else {
        return;
    };
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        client.delete(url).header("mcp-session-id", s).send(),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_cut_at_blank_lines_and_data_lines_joined() {
        let mut b =
            b"event: message\ndata: {\"a\":1}\n\ndata: x\r\ndata: y\r\n\r\ndata: part".to_vec();
        let ev = take_events(&mut b);
        assert_eq!(ev, vec![b"{\"a\":1}".to_vec(), b"x\ny".to_vec()]);
        assert_eq!(b, b"data: part");
    }
}
