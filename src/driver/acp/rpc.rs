//! ACP's framing: newline-delimited JSON-RPC 2.0 on the agent's stdin and
//! stdout. [`read_frames`] splits stdout into frames holding at most
//! [`MAX_FRAME`] bytes of one (a longer line is dropped as it arrives and
//! becomes one [`Frame::Bad`]), keeps the raw bytes in `stdout.log` within
//! the run's [`Budget`], and hands frames on through a bounded channel (so a
//! flood waits in the agent's pipe, not in chaosrun's memory). [`Out`] writes
//! requests (numbering their ids), notifications and responses.

use std::sync::Arc;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::mpsc;

use crate::driver::output::{keep_in_log, Budget, STDOUT};

/// The longest frame held in memory (4 MiB).
pub const MAX_FRAME: usize = 4 << 20;
/// Characters of a bad frame quoted in its [`Frame::Bad`].
const BAD_KEEP_CHARS: usize = 200;

/// A JSON-RPC error the client side answers with.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    /// -32601: the method is not one chaosrun serves.
    pub fn not_found(method: &str) -> RpcError {
        RpcError::new(-32601, format!("method not found: {}", clip(method, 100)))
    }

    /// -32602: the request's params do not fit.
    pub fn invalid(message: impl Into<String>) -> RpcError {
        RpcError::new(-32602, message)
    }
}

/// One frame the agent wrote.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// The agent asks the client side (an id to answer).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// An answer to one of chaosrun's requests.
    Response {
        id: Value,
        result: Result<Value, RpcError>,
    },
    /// Not a JSON-RPC message (or too long): its bounded text.
    Bad(String),
}

/// `s` cut to at most `chars` characters.
pub fn clip(s: &str, chars: usize) -> String {
    s.chars().take(chars).collect()
}

fn bad(line: &str) -> Frame {
    Frame::Bad(clip(line, BAD_KEEP_CHARS))
}

/// Parse one line.
pub fn parse(line: &[u8]) -> Frame {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(text) else {
        return bad(text);
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return bad(text);
    }
    let id = m.get("id").filter(|i| i.is_string() || i.is_number());
    match (m.get("method").and_then(Value::as_str), id) {
        (Some(method), Some(id)) => Frame::Request {
            id: id.clone(),
            method: method.to_string(),
            params: m.get("params").cloned().unwrap_or(Value::Null),
        },
        (Some(method), None) if m.get("id").is_none() => Frame::Notification {
            method: method.to_string(),
            params: m.get("params").cloned().unwrap_or(Value::Null),
        },
        (None, Some(id)) => match (m.get("result"), m.get("error")) {
            (Some(r), None) => Frame::Response {
                id: id.clone(),
                result: Ok(r.clone()),
            },
            (None, Some(e)) => Frame::Response {
                id: id.clone(),
                result: Err(RpcError {
                    code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: clip(
                        e.get("message").and_then(Value::as_str).unwrap_or(""),
                        BAD_KEEP_CHARS * 10,
                    ),
                }),
            },
            _ => bad(text),
        },
        _ => bad(text),
    }
}

/// Splits bytes into lines, holding at most [`MAX_FRAME`] of one.
#[derive(Default)]
pub struct Splitter {
    line: Vec<u8>,
    len: usize,
}

impl Splitter {
    /// Feed bytes; every frame they complete.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Frame>) {
        for part in bytes.split_inclusive(|&b| b == b'\n') {
            let body = part.strip_suffix(b"\n").unwrap_or(part);
            let room = MAX_FRAME.saturating_sub(self.line.len()).min(body.len());
            self.line.extend_from_slice(&body[..room]);
            self.len += body.len();
            if part.ends_with(b"\n") {
                out.extend(self.take());
            }
        }
    }

    /// The last, unterminated line at EOF.
    pub fn finish(&mut self) -> Option<Frame> {
        self.take()
    }

    fn take(&mut self) -> Option<Frame> {
        let (line, len) = (
            std::mem::take(&mut self.line),
            std::mem::take(&mut self.len),
        );
        if len > MAX_FRAME {
            let head = String::from_utf8_lossy(&line[..line.len().min(BAD_KEEP_CHARS)]);
            return Some(Frame::Bad(format!(
                "a frame of {len} bytes, over the {MAX_FRAME}-byte cap: {head}"
            )));
        }
        (!line.iter().all(u8::is_ascii_whitespace)).then(|| parse(&line))
    }
}

/// Read the agent's stdout: raw bytes into its log (within the budget),
/// frames into `tx` (waiting while the channel is full).
pub async fn read_frames(
    mut pipe: impl AsyncRead + Unpin,
    mut log: std::fs::File,
    budget: Arc<Budget>,
    worker: usize,
    tx: mpsc::Sender<Frame>,
) {
    let _open = budget.opened();
    let mut buf = vec![0u8; 64 * 1024];
    let mut redact = crate::redact::Stream::default();
    let mut split = Splitter::default();
    let mut frames = Vec::new();
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        keep_in_log(&budget, worker, STDOUT, &mut log, &redact.feed(&buf[..n]));
        split.feed(&buf[..n], &mut frames);
        for f in frames.drain(..) {
            if tx.send(f).await.is_err() {
                return;
            }
        }
    }
    keep_in_log(&budget, worker, STDOUT, &mut log, &redact.finish());
    if let Some(f) = split.finish() {
        let _ = tx.send(f).await;
    }
}

/// The writing side: the agent's stdin.
pub struct Out {
    stdin: Option<ChildStdin>,
    next_id: u64,
}

impl Out {
    pub fn new(stdin: Option<ChildStdin>) -> Out {
        Out { stdin, next_id: 0 }
    }

    async fn write(&mut self, msg: Value) -> std::io::Result<()> {
        let Some(w) = self.stdin.as_mut() else {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        };
        let mut line = serde_json::to_vec(&msg)?;
        line.push(b'\n');
        w.write_all(&line).await?;
        w.flush().await
    }

    /// Send a request; its id.
    pub async fn request(&mut self, method: &str, params: Value) -> std::io::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.write(msg).await.map(|()| id)
    }

    pub async fn notify(&mut self, method: &str, params: Value) -> std::io::Result<()> {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.write(msg).await
    }

    pub async fn respond(&mut self, id: Value, result: &Result<Value, RpcError>) {
        let msg = match result {
            Ok(v) => json!({"jsonrpc": "2.0", "id": id, "result": v}),
            Err(e) => json!({"jsonrpc": "2.0", "id": id,
                             "error": {"code": e.code, "message": e.message}}),
        };
        let _ = self.write(msg).await;
    }

    /// How many requests were sent (their ids are 0 to this, excluded).
    pub fn sent(&self) -> u64 {
        self.next_id
    }

    /// Close stdin (end of the session: the agent should exit).
    pub fn close(&mut self) {
        self.stdin = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_told_apart_and_bad_ones_bounded() {
        let f = |s: &str| parse(s.as_bytes());
        assert!(matches!(
            f(r#"{"jsonrpc":"2.0","id":3,"method":"fs/read_text_file","params":{}}"#),
            Frame::Request { method, .. } if method == "fs/read_text_file"
        ));
        assert!(matches!(
            f(r#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#),
            Frame::Notification { .. }
        ));
        assert_eq!(
            f(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom"}}"#),
            Frame::Response {
                id: json!(1),
                result: Err(RpcError::new(-32603, "boom"))
            }
        );
        for bad in [
            "not json",
            "[1,2]",
            r#"{"id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
        ] {
            assert!(matches!(f(bad), Frame::Bad(_)), "{bad}");
        }
        let long = format!("\"{}\"", "x".repeat(5000));
        match f(&long) {
            Frame::Bad(t) => assert_eq!(t.chars().count(), BAD_KEEP_CHARS),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_line_over_the_cap_is_one_bad_frame_and_never_held_whole() {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..6 {
            s.feed(&chunk, &mut out);
            assert!(s.line.len() <= MAX_FRAME);
        }
        s.feed(b"\n{\"jsonrpc\":\"2.0\",\"method\":\"m\"}\n\n", &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(matches!(&out[0], Frame::Bad(t) if t.contains("over the")));
        assert!(matches!(&out[1], Frame::Notification { .. }));
    }
}
