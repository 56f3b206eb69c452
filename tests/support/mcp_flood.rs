//! Hostile MCP clients flooding `chaosrun serve --mcp` (issue 18 item 2),
//! shared by `tests/hostile_flood.rs` (which asserts) and `cargo bench
//! --bench memory` (which prints figures):
//!
//! - [`stdio_calls_unread`]: a stdio client (through the real `chaosrun
//!   mcp-stdio` relay) that writes up to 300k `tools/call` and never reads;
//! - [`stdio_pings_read`]: one that writes 400k pings and reads every answer;
//! - [`http_hung_calls`]: rounds of 60 Streamable HTTP `tools/call` with a
//!   multi-MB argument, each answered by `hang`, whose clients disconnect once
//!   the call is in flight (the SSE stream's headers arrived).
//!
//! The server's peak RSS comes from outside: `wait4` on the `serve` process.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `chaosrun serve --mcp`.
pub struct Served {
    pub pid: i32,
    child: Option<Child>,
    out: Option<BufReader<ChildStdout>>,
    pub socket: PathBuf,
    pub port: u16,
    _dir: tempfile::TempDir,
}

/// How `serve` ended after SIGTERM.
pub struct Stopped {
    pub code: Option<i32>,
    /// Peak RSS of the server (KiB), from wait4.
    pub max_rss_kb: i64,
    /// The recording it printed (Null if none).
    pub recording: Value,
    /// SIGTERM to exit.
    pub exit_seconds: f64,
}

/// Start `chaosrun serve --mcp` with `rules` (a row's `mcp:` section).
pub fn serve(bin: &Path, rules: &str) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    std::fs::write(&file, rules).unwrap();
    let mut child = Command::new(bin)
        .args(["serve", "--mcp"])
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("chaosrun serve --mcp starts");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words.get(..3),
        Some(&["chaosrun", "MCP", "server:"][..]),
        "{line}"
    );
    let port = words[6]
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line}"));
    Served {
        pid: child.id() as i32,
        child: Some(child),
        out: Some(out),
        socket: PathBuf::from(words[4]),
        port,
        _dir: dir,
    }
}

/// Wait for `pid` (our child) with a deadline: exit code and peak RSS (KiB).
pub fn wait4_within(pid: i32, limit: Duration) -> Option<(Option<i32>, i64)> {
    let deadline = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: wait4 on our own child with valid out-pointers.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
            return Some((code, usage.ru_maxrss));
        }
        if r != 0 || Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Served {
    /// SIGTERM, then wait (bounded) for the exit and the recording.
    pub fn stop(mut self, limit: Duration) -> Stopped {
        let t = Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid, libc::SIGTERM) };
        let mut out = self.out.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let waited = wait4_within(self.pid, limit);
        let exit_seconds = t.elapsed().as_secs_f64();
        let Some((code, max_rss_kb)) = waited else {
            // SAFETY: our own child.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let _ = wait4_within(self.pid, Duration::from_secs(10));
            self.child.take();
            panic!("chaosrun serve --mcp did not exit within {limit:?} of SIGTERM");
        };
        self.child.take(); // reaped by wait4 above
        let text = reader.join().unwrap_or_default();
        let recording = text
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or(Value::Null);
        Stopped {
            code,
            max_rss_kb,
            recording,
            exit_seconds,
        }
    }

    fn relay(&self, bin: &Path) -> Child {
        Command::new(bin)
            .args(["mcp-stdio", "--socket"])
            .arg(&self.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the relay starts")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One `tools/call` line of fixed length (ids `c0000001`, …).
fn call_line(n: u64) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":\"c{n:07}\",\"method\":\"tools/call\",\"params\":{{\"name\":\"probe\",\"arguments\":{{\"text\":\"flood\"}}}}}}\n"
    )
}

/// What the unread stdio flood did.
pub struct Unread {
    /// `tools/call` lines fully written before the pipe stayed full.
    pub sent: u64,
    /// Whether the pipe stayed full for `stall` (the server stopped reading).
    pub blocked: bool,
    /// The relay process (its stdout never read), to end after the server.
    pub relay: Child,
}

/// Write up to `total` `tools/call` to a relay's stdin, never reading its
/// stdout; stop when the pipe has not taken a byte for `stall`.
pub fn stdio_calls_unread(bin: &Path, s: &Served, total: u64, stall: Duration) -> Unread {
    let mut relay = s.relay(bin);
    let stdin = relay.stdin.take().unwrap();
    let fd = stdin.as_raw_fd();
    // SAFETY: fcntl on a pipe fd we own.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let line_len = call_line(0).len() as u64;
    let (mut sent, mut blocked) = (0u64, false);
    let mut pending: Vec<u8> = Vec::new();
    let mut at = 0usize;
    let mut written_bytes = 0u64;
    let mut next = 0u64;
    while sent < total {
        if at == pending.len() {
            pending.clear();
            at = 0;
            while pending.len() < 64 * 1024 && next < total {
                pending.extend_from_slice(call_line(next).as_bytes());
                next += 1;
            }
        }
        // SAFETY: write from a live buffer to our pipe fd.
        let n = unsafe { libc::write(fd, pending[at..].as_ptr().cast(), pending.len() - at) };
        if n > 0 {
            at += n as usize;
            written_bytes += n as u64;
            sent = written_bytes / line_len;
            continue;
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: poll on one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, stall.as_millis() as i32) };
        if r == 0 {
            blocked = true;
            break;
        }
        if r < 0 || p.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            break;
        }
    }
    drop(stdin);
    Unread {
        sent,
        blocked,
        relay,
    }
}

/// End a relay whose stdout nobody read: close that pipe (its blocked write
/// fails), then wait (bounded) for its exit once the server is gone.
pub fn end_relay(mut relay: Child, limit: Duration) -> Option<std::process::ExitStatus> {
    drop(relay.stdout.take());
    drop(relay.stdin.take());
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(st)) = relay.try_wait() {
            return Some(st);
        }
        if Instant::now() >= deadline {
            let _ = relay.kill();
            let _ = relay.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the read ping flood did.
pub struct Pinged {
    pub sent: u64,
    pub answered: u64,
    pub seconds: f64,
    pub relay_exit: Option<std::process::ExitStatus>,
}

/// Write `total` pings through a relay while reading every answer (bounded
/// by `limit`); then close stdin, and the relay exits.
pub fn stdio_pings_read(bin: &Path, s: &Served, total: u64, limit: Duration) -> Pinged {
    let t = Instant::now();
    let mut relay = s.relay(bin);
    let mut stdin = relay.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let mut sent = 0u64;
        let mut buf = Vec::with_capacity(64 * 1024);
        while sent < total {
            buf.clear();
            while buf.len() < 60 * 1024 && sent < total {
                buf.extend_from_slice(
                    format!("{{\"jsonrpc\":\"2.0\",\"id\":{sent},\"method\":\"ping\"}}\n")
                        .as_bytes(),
                );
                sent += 1;
            }
            if stdin.write_all(&buf).is_err() {
                break;
            }
        }
        sent
    });
    let mut out = BufReader::new(relay.stdout.take().unwrap());
    let mut answered = 0u64;
    let mut line = Vec::new();
    let deadline = t + limit;
    while answered < total && Instant::now() < deadline {
        line.clear();
        match out.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.windows(9).any(|w| w == b"\"result\":") => answered += 1,
            Ok(_) => {}
        }
    }
    let seconds = t.elapsed().as_secs_f64();
    // Unread answers no longer hold the relay up (its writes to a closed
    // pipe fail), so the writer gets through whatever the reader did.
    drop(out);
    let sent = writer.join().unwrap_or(0);
    let relay_exit = end_relay(relay, Duration::from_secs(10));
    Pinged {
        sent,
        answered,
        seconds,
        relay_exit,
    }
}

fn post_head(port: u16, sid: Option<&str>, len: usize) -> String {
    let sid = sid.map_or(String::new(), |s| format!("mcp-session-id: {s}\r\n"));
    format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\n{sid}content-length: {len}\r\nconnection: close\r\n\r\n"
    )
}

/// Read a response's head (through the blank line), bounded by the stream's
/// read timeout.
fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// `initialize` over HTTP; the session id.
pub fn http_initialize(port: u16) -> String {
    let body = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}"#;
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(post_head(port, None, body.len()).as_bytes())
        .unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let head = read_head(&mut s);
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no session id in {head}"))
}

/// One round: `calls` concurrent `tools/call` with an argument of `arg_bytes`
/// (one shared buffer), each waiting (up to `wait`) for its SSE stream's
/// `200`; then every client disconnects. How many got their `200`.
pub fn http_hung_calls(
    port: u16,
    sid: &str,
    calls: usize,
    arg_bytes: usize,
    wait: Duration,
) -> usize {
    let big: Arc<Vec<u8>> = Arc::new(vec![b'm'; arg_bytes]);
    let all_in = Arc::new(Barrier::new(calls));
    let threads: Vec<_> = (0..calls)
        .map(|k| {
            let (big, all_in, sid) = (big.clone(), all_in.clone(), sid.to_string());
            std::thread::spawn(move || {
                let pre = format!(
                    r#"{{"jsonrpc":"2.0","id":"h{k}","method":"tools/call","params":{{"name":"probe","arguments":{{"text":""#
                );
                let post = "\"}}}";
                let len = pre.len() + big.len() + post.len();
                let ok = (|| {
                    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
                    s.set_read_timeout(Some(wait)).ok()?;
                    s.set_write_timeout(Some(wait)).ok()?;
                    s.write_all(post_head(port, Some(&sid), len).as_bytes()).ok()?;
                    s.write_all(pre.as_bytes()).ok()?;
                    s.write_all(&big).ok()?;
                    s.write_all(post.as_bytes()).ok()?;
                    let head = read_head(&mut s);
                    Some((head.starts_with("HTTP/1.1 200"), s))
                })();
                // Every client holds its call until all are in, then leaves.
                all_in.wait();
                ok.is_some_and(|(ok, s)| {
                    drop(s);
                    ok
                })
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().unwrap_or(false))
        .filter(|ok| *ok)
        .count()
}
