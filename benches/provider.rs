//! Throughput of the fault provider, as an agent's retry storm would hit it.
//!
//! `cargo bench --bench provider` builds the `chaosrun` binary (cargo builds bin
//! targets for benches and passes its path as `CARGO_BIN_EXE_chaosrun`; if that
//! is missing, `target/release/chaosrun` beside this bench is used), then:
//!
//! 1. runs `chaosrun serve` as a second process with a script answering every
//!    main call `error 500`, drives it with `CONNS` concurrent keep-alive
//!    connections for `ERRORS` requests, prints requests/s and p50/p99 latency,
//!    stops it with SIGTERM and compares its summary count with the count sent;
//! 2. the same with a streamed `text` answer (`TEXTS` requests);
//! 3. steps 1 and 2 on every other wire (`chaosrun serve --wire W`:
//!    openai-responses, anthropic, gemini, each with its own request body and
//!    path, a text reply counted only when its terminal event arrived) and a
//!    per-wire table side by side with the chat wire;
//! 4. the same two against `benches/fake_provider.py` (Python's
//!    `ThreadingHTTPServer`) and prints the ratios.
//!
//! Targets: ≥ 20,000 error responses/s and ≥ 10x the Python fake; every wire
//! within 1.5x of the chat wire's throughput. Figures are
//! printed, never asserted (timing depends on the machine). The client is a
//! minimal HTTP/1.1 one over tokio sockets so that it costs the shared CPUs
//! little next to the server under test.

mod common;
use common::chaosrun_bin;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader as TokioBufReader};
use tokio::net::TcpStream;

const CONNS: usize = 32;
const ERRORS: u64 = 100_000;
const TEXTS: u64 = 20_000;
const PY_ERRORS: u64 = 10_000;
const PY_TEXTS: u64 = 5_000;

const TEXT: &str = "The quick brown fox jumps over the lazy dog, then rests a while.";

/// The wires, as `chaosrun serve --wire` names them; the first is the chat wire.
const WIRES: [&str; 4] = ["openai-chat", "openai-responses", "anthropic", "gemini"];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Error,
    Text,
}

struct Figures {
    rps: f64,
    p50: Duration,
    p99: Duration,
    sent: u64,
    recorded: Option<u64>,
}

fn write_script(dir: &std::path::Path, mode: Mode) -> PathBuf {
    let path = dir.join(match mode {
        Mode::Error => "error.yaml",
        Mode::Text => "text.yaml",
    });
    let body = match mode {
        Mode::Error => "- reply: {kind: error, status: 500}\n".to_string(),
        Mode::Text => format!("- reply: {{kind: text, text: '{TEXT}', chunk_chars: 16}}\n"),
    };
    std::fs::write(&path, body).expect("write script");
    path
}

/// Spawn a server and read its "listening on http://127.0.0.1:PORT/v1" line.
fn spawn(mut cmd: Command) -> (Child, BufReader<ChildStdout>, u16) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {cmd:?}: {e}"));
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).expect("read listening line");
    let port = line
        .trim()
        .rsplit("127.0.0.1:")
        .next()
        .map(|rest| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (child, out, port)
}

/// SIGTERM the server and parse `requests: N` from its summary.
fn stop(mut child: Child, mut out: BufReader<ChildStdout>) -> Option<u64> {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let mut recorded = None;
    let mut line = String::new();
    while out.read_line(&mut line).unwrap_or(0) > 0 {
        if let Some(rest) = line.trim().strip_prefix("requests: ") {
            recorded = rest.split_whitespace().next().and_then(|n| n.parse().ok());
        }
        line.clear();
    }
    let _ = child.wait();
    recorded
}

/// One main call on `wire`: path and body in that wire's shape.
fn request_bytes(port: u16, mode: Mode, wire: &str) -> Vec<u8> {
    use serde_json::json;
    let stream = mode == Mode::Text;
    let (path, body) = match wire {
        "openai-responses" => (
            "/v1/responses".to_string(),
            json!({
                "model": "bench", "stream": stream, "instructions": "You are a test agent.",
                "tools": [{"type": "function", "name": "terminal", "parameters": {"type": "object"}}],
                "input": [{"role": "user", "content": "run the thing"}],
            }),
        ),
        "anthropic" => (
            "/v1/messages".to_string(),
            json!({
                "model": "bench", "max_tokens": 100, "stream": stream, "system": "You are a test agent.",
                "tools": [{"name": "terminal", "input_schema": {"type": "object"}}],
                "messages": [{"role": "user", "content": "run the thing"}],
            }),
        ),
        "gemini" => (
            if stream {
                "/v1beta/models/bench:streamGenerateContent?alt=sse".to_string()
            } else {
                "/v1beta/models/bench:generateContent".to_string()
            },
            json!({
                "systemInstruction": {"parts": [{"text": "You are a test agent."}]},
                "tools": [{"functionDeclarations": [{"name": "terminal", "parameters": {"type": "object"}}]}],
                "contents": [{"role": "user", "parts": [{"text": "run the thing"}]}],
            }),
        ),
        _ => (
            "/v1/chat/completions".to_string(),
            json!({
                "model": "bench",
                "stream": stream,
                "tools": [{"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}}],
                "messages": [
                    {"role": "system", "content": "You are a test agent."},
                    {"role": "user", "content": "run the thing"},
                ],
            }),
        ),
    };
    let body = body.to_string();
    format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Whether a streamed text body reached `wire`'s terminal event.
fn finished(wire: &str, body: &[u8]) -> bool {
    let tail = &body[body.len().saturating_sub(4096)..];
    let has = |needle: &[u8]| tail.windows(needle.len()).any(|w| w == needle);
    match wire {
        "openai-responses" => has(b"event: response.completed\n"),
        "anthropic" => body.ends_with(b"data: {\"type\":\"message_stop\"}\n\n"),
        "gemini" => has(b"\"finishReason\":\"STOP\""),
        _ => body.ends_with(b"data: [DONE]\n\n"),
    }
}

/// Read one response: status and body (content-length or chunked).
async fn read_response(r: &mut TokioBufReader<TcpStream>) -> std::io::Result<(u16, Vec<u8>)> {
    let mut line = String::new();
    r.read_line(&mut line).await?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut length = None;
    let mut chunked = false;
    loop {
        line.clear();
        r.read_line(&mut line).await?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let lower = l.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        } else if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line).await?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| std::io::Error::other(format!("bad chunk size {line:?}")))?;
            let start = body.len();
            body.resize(start + size + 2, 0);
            r.read_exact(&mut body[start..]).await?;
            body.truncate(start + size);
            if size == 0 {
                break;
            }
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        r.read_exact(&mut body).await?;
    }
    Ok((status, body))
}

/// Send `total` requests over `CONNS` keep-alive connections; return figures.
async fn drive(port: u16, mode: Mode, total: u64, wire: &'static str) -> Figures {
    let request = Arc::new(request_bytes(port, mode, wire));
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..CONNS)
        .map(|_| {
            let (request, next) = (request.clone(), next.clone());
            tokio::spawn(async move {
                let stream = TcpStream::connect(("127.0.0.1", port))
                    .await
                    .expect("connect");
                stream.set_nodelay(true).unwrap();
                let mut r = TokioBufReader::with_capacity(16 * 1024, stream);
                let mut lat = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    let t = Instant::now();
                    r.get_mut().write_all(&request).await.expect("write");
                    let (status, body) = read_response(&mut r).await.expect("response");
                    lat.push(t.elapsed());
                    match mode {
                        Mode::Error => assert_eq!(status, 500),
                        Mode::Text => {
                            assert_eq!(status, 200);
                            assert!(finished(wire, &body), "{wire}: text body incomplete");
                        }
                    }
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::with_capacity(total as usize);
    for t in tasks {
        lat.extend(t.await.expect("client task"));
    }
    let elapsed = start.elapsed();
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    Figures {
        rps: lat.len() as f64 / elapsed.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
        sent: lat.len() as u64,
        recorded: None,
    }
}

fn print(label: &str, f: &Figures) {
    let recorded = f.recorded.map_or("?".to_string(), |n| n.to_string());
    println!(
        "{label:<26} {:>9.0} req/s   p50 {:>7.3} ms   p99 {:>7.3} ms   sent {:>6}   server recorded {:>6}{}",
        f.rps,
        f.p50.as_secs_f64() * 1e3,
        f.p99.as_secs_f64() * 1e3,
        f.sent,
        recorded,
        if f.recorded == Some(f.sent) { "  (equal)" } else { "  (MISMATCH)" },
    );
    let _ = std::io::stdout().flush();
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = chaosrun_bin();
    assert!(
        bin.exists(),
        "{} missing: run `cargo build --release` first",
        bin.display()
    );
    println!(
        "chaosrun provider bench: {CONNS} keep-alive connections, binary {}",
        bin.display()
    );

    // Every wire: error replies and short streams, chat first.
    let mut per_wire = Vec::new();
    for wire in WIRES {
        let mut figures = Vec::new();
        for (mode, total, kind) in [
            (Mode::Error, ERRORS, "error 500"),
            (Mode::Text, TEXTS, "text SSE"),
        ] {
            let script = write_script(dir.path(), mode);
            let mut cmd = Command::new(&bin);
            cmd.args([
                "serve", "--port", "0", "--quiet", "--wire", wire, "--script",
            ])
            .arg(&script);
            let (child, out, port) = spawn(cmd);
            let mut f = rt.block_on(drive(port, mode, total, wire));
            f.recorded = stop(child, out);
            print(&format!("{wire:<17} {kind}"), &f);
            figures.push(f);
        }
        per_wire.push((wire, figures));
    }
    let ours = &per_wire[0].1;
    println!();
    println!(
        "{:<17} {:>12} {:>11} {:>9} {:>12} {:>11} {:>9}",
        "wire", "error req/s", "error p99", "vs chat", "text req/s", "text p99", "vs chat"
    );
    for (wire, f) in &per_wire {
        println!(
            "{wire:<17} {:>12.0} {:>8.3} ms {:>8.2}x {:>12.0} {:>8.3} ms {:>8.2}x",
            f[0].rps,
            f[0].p99.as_secs_f64() * 1e3,
            f[0].rps / ours[0].rps,
            f[1].rps,
            f[1].p99.as_secs_f64() * 1e3,
            f[1].rps / ours[1].rps,
        );
    }
    println!("(targets: every wire >= 20000 error req/s and within 1.5x of the chat wire)");
    println!();

    let fake = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/fake_provider.py");
    let mut theirs = Vec::new();
    for (mode, total, label, arg) in [
        (Mode::Error, PY_ERRORS, "python fake     error 500", "error"),
        (Mode::Text, PY_TEXTS, "python fake     text SSE", "text"),
    ] {
        let mut cmd = Command::new("python3");
        cmd.arg(&fake).args(["0", arg]);
        let (child, out, port) = spawn(cmd);
        let mut f = rt.block_on(drive(port, mode, total, "openai-chat"));
        f.recorded = stop(child, out);
        print(label, &f);
        theirs.push(f);
    }

    println!(
        "ratio chaosrun / python: error {:.1}x, text {:.1}x   (targets: >= 20000 error req/s, >= 10x)",
        ours[0].rps / theirs[0].rps,
        ours[1].rps / theirs[1].rps,
    );
}
