//! chaosrun's memory under floods: figures printed, never asserted.
//!
//! `cargo bench --bench memory` builds the release `chaosrun` and measures:
//!
//! 1. **Hostile floods**: for each mode of `tests/fixtures/agents/hostile_flood.py`
//!    (1 GiB stderr, a 100 MB event line, 10^6 events, a closed stdout, a
//!    128 MiB journal, a 128 MiB log) against `tests/fixtures/flood_table.yaml`:
//!    chaosrun's own peak RSS (`--stats`, getrusage of itself) and, from
//!    outside, `wait4`'s peak RSS of chaosrun and its waited children.
//!    Target: < 64 MB.
//! 2. **`chaosrun serve`** after N requests of 2.5 MB each (a chat whose last
//!    tool result is 2.5 MB), then N/10 of 2.5 MB spread over 160 messages of
//!    16 KiB: VmRSS and VmHWM of the server from /proc. Target: ≤ 100 MB.
//! 3. **MCP floods** on `chaosrun serve --mcp` (`tests/support/mcp_flood.rs`,
//!    the clients `tests/hostile_flood.rs` asserts with): 300k `tools/call`
//!    over stdio never read, 400k pings over stdio read, 60 hung Streamable
//!    HTTP calls with 7 MB arguments whose clients disconnect: the server's
//!    peak RSS from wait4. Target: < 64 MB.
//! 4. **Heavy rows**: the 55 rows of `scenarios.yaml` at once (the default
//!    `--jobs`) on `benches/heavy/agent.py`, the reference agent sending a
//!    real agent's traffic (every request a 48 KB system prompt and 400
//!    earlier messages, about 1 MB; 100 KB of stderr per request):
//!    chaosrun's own peak RSS (`--stats`). Target: < 64 MB.
//! 5. **A shared cassette**: one row, then six rows at once, replaying one
//!    49 MB cassette (`{kind: cassette}`; its entries carry the recorded
//!    request histories): chaosrun's own peak RSS. Target: six rows within a
//!    few MB of one (the file is parsed once and shared), < 64 MB.
//!
//! Environment: `CHAOSRUN_BENCH_SERVE_REQUESTS` (default 10000) for N, and
//! `CHAOSRUN_BENCH_FLOOD_MODES` (comma-separated; default all) for a quick
//! run; `CHAOSRUN_BENCH_ONLY` (comma-separated of `floods`, `serve`, `mcp`,
//! `heavy`, `cassette`; default all) picks the sections.

mod common;
#[path = "../tests/support/mcp_flood.rs"]
mod mcp_flood;
use common::chaosrun_bin;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MODES: &[&str] = &[
    "stderr_flood",
    "huge_event_line",
    "event_flood",
    "closes_stdout",
    "journal_flood",
    "log_flood",
];
const RSS_TARGET_MB: f64 = 64.0;
const SERVE_TARGET_MB: f64 = 100.0;
const BODY_BYTES: usize = 2_500_000;
const CONNS: usize = 4;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "OVER TARGET"
    }
}

/// `chaosrun self: cpu X s (...), peak rss Y.Y MB` → Y.Y
fn self_rss(stderr: &str) -> Option<f64> {
    let line = stderr.lines().find(|l| l.starts_with("chaosrun self:"))?;
    let rest = line.split("peak rss ").nth(1)?;
    rest.trim().strip_suffix("MB")?.trim().parse().ok()
}

/// Wait for `pid` (with a deadline): exit code and wait4's peak RSS in KiB.
fn wait4_within(pid: i32, limit: Duration) -> Option<(Option<i32>, i64)> {
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
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn flood(bin: &Path, dir: &Path, mode: &str) {
    let err_path = dir.join(format!("{mode}.stderr"));
    let started = Instant::now();
    let child = Command::new(bin)
        .arg(repo().join("tests/fixtures/flood_table.yaml"))
        .arg("--agent")
        .arg(repo().join("tests/fixtures/agents/hostile_flood.py"))
        .arg(format!("--agent-arg=--mode={mode}"))
        .args(["--no-progress", "--stats"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("chaosrun starts");
    let pid = child.id() as i32;
    let waited = wait4_within(pid, Duration::from_secs(300));
    drop(child);
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    match waited {
        Some((code, outside_kb)) => {
            let own = self_rss(&stderr);
            let outside = outside_kb as f64 / 1024.0;
            println!(
                "  {mode:<16} exit {:<4} {:>5.1} s   chaosrun peak rss {:>6} MB   wait4 (with children) {:>6.1} MB   target < {RSS_TARGET_MB} MB   {}",
                code.map_or("?".into(), |c| c.to_string()),
                started.elapsed().as_secs_f64(),
                own.map_or("?".into(), |v| format!("{v:.1}")),
                outside,
                verdict(own.unwrap_or(outside) < RSS_TARGET_MB),
            );
        }
        None => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = wait4_within(pid, Duration::from_secs(10));
            println!("  {mode:<16} did not finish within 300 s (killed)");
        }
    }
    let _ = std::io::stdout().flush();
}

/// A chat body of about 2.5 MB: one huge tool result, or 160 messages.
fn body(spread: bool) -> Vec<u8> {
    let call = serde_json::json!({"id": "c1", "type": "function",
        "function": {"name": "terminal", "arguments": "{\"command\": \"cat big\"}"}});
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": "You are a test agent."}),
        serde_json::json!({"role": "user", "content": "run the thing"}),
    ];
    if spread {
        let piece = "h".repeat(BODY_BYTES / 160);
        for i in 0..160 {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            messages.push(serde_json::json!({"role": role, "content": piece}));
        }
    } else {
        messages
            .push(serde_json::json!({"role": "assistant", "content": null, "tool_calls": [call]}));
        messages.push(
            serde_json::json!({"role": "tool", "tool_call_id": "c1", "content": "o".repeat(BODY_BYTES)}),
        );
    }
    serde_json::json!({
        "model": "bench",
        "stream": false,
        "tools": [{"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}}],
        "messages": messages,
    })
    .to_string()
    .into_bytes()
}

/// Send `total` copies of `body` over `CONNS` connections (one request each).
fn send(port: u16, body: &[u8], total: u64) -> u64 {
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let body = Arc::new(body.to_vec());
    let next = Arc::new(AtomicU64::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..CONNS)
        .map(|_| {
            let (body, next, ok, head) = (body.clone(), next.clone(), ok.clone(), head.clone());
            std::thread::spawn(move || {
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                        continue;
                    };
                    if s.write_all(head.as_bytes()).is_err() || s.write_all(&body).is_err() {
                        continue;
                    }
                    let mut reply = Vec::new();
                    let _ = s.read_to_end(&mut reply);
                    if reply.starts_with(b"HTTP/1.1 200") {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    ok.load(Ordering::Relaxed)
}

/// VmRSS and VmHWM of `pid`, in MB.
fn rss(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn serve(bin: &Path, n: u64) {
    let mut child = Command::new(bin)
        .args(["serve", "--port", "0", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("chaosrun serve starts");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).expect("listening line");
    let port: u16 = line
        .trim()
        .rsplit("127.0.0.1:")
        .next()
        .and_then(|r| r.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    let pid = child.id();
    let (idle, _) = rss(pid);
    println!("  idle                                  rss {idle:>6.1} MB");
    for (label, spread, count) in [
        ("one 2.5 MB tool result", false, n),
        ("160 messages of 16 KiB", true, (n / 10).max(1)),
    ] {
        let body = body(spread);
        let t = Instant::now();
        let ok = send(port, &body, count);
        let (now, peak) = rss(pid);
        println!(
            "  +{count:>6} × {:.1} MB ({label:<22}) {ok:>6} ok in {:>6.1} s   rss {now:>6.1} MB   peak {peak:>6.1} MB   target ≤ {SERVE_TARGET_MB} MB   {}",
            body.len() as f64 / 1e6,
            t.elapsed().as_secs_f64(),
            verdict(peak <= SERVE_TARGET_MB),
        );
        let _ = std::io::stdout().flush();
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let mut rest = String::new();
    let _ = out.read_to_string(&mut rest);
    let _ = child.wait();
    println!("  summary: {}", rest.trim());
}

/// One MCP flood's line: what the client saw, the server's peak RSS.
fn mcp_line(what: &str, client: String, s: mcp_flood::Stopped) {
    let mb = s.max_rss_kb as f64 / 1024.0;
    println!(
        "  {what:<34} {client:<44} serve peak rss {mb:>6.1} MB   target < {RSS_TARGET_MB} MB   {}   exit {:?} {:.2} s after SIGTERM",
        verdict(mb < RSS_TARGET_MB),
        s.code,
        s.exit_seconds
    );
    let _ = std::io::stdout().flush();
}

fn mcp_floods(bin: &Path) {
    let s = mcp_flood::serve(bin, "rules: []\n");
    let t = Instant::now();
    let f = mcp_flood::stdio_calls_unread(bin, &s, 300_000, Duration::from_secs(3));
    let client = format!(
        "{} written, then blocked: {} ({:.1} s)",
        f.sent,
        f.blocked,
        t.elapsed().as_secs_f64()
    );
    let stopped = s.stop(Duration::from_secs(10));
    mcp_flood::end_relay(f.relay, Duration::from_secs(10));
    mcp_line("stdio: 300k tools/call, never read", client, stopped);

    let s = mcp_flood::serve(bin, "rules: []\n");
    let p = mcp_flood::stdio_pings_read(bin, &s, 400_000, Duration::from_secs(300));
    let client = format!("{} answered in {:.1} s", p.answered, p.seconds);
    mcp_line(
        "stdio: 400k pings, read",
        client,
        s.stop(Duration::from_secs(10)),
    );

    let s = mcp_flood::serve(bin, "rules: [{reply: {kind: hang}}]\n");
    let sid = mcp_flood::http_initialize(s.port);
    let t = Instant::now();
    let ok = mcp_flood::http_hung_calls(s.port, &sid, 60, 7 << 20, Duration::from_secs(120));
    let client = format!(
        "{ok} in flight in {:.1} s, then gone",
        t.elapsed().as_secs_f64()
    );
    mcp_line(
        "http: 60 hung calls of 7 MB",
        client,
        s.stop(Duration::from_secs(10)),
    );
}

/// Run `table` with `args` and `--stats`: exit code, the summary line and
/// chaosrun's own peak RSS.
fn table_run(bin: &Path, dir: &Path, table: &Path, args: &[&str]) -> (i32, String, Option<f64>) {
    let err_path = dir.join("table.stderr");
    let out = Command::new(bin)
        .arg(table)
        .args(args)
        .args(["--no-progress", "--stats"])
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .output()
        .expect("chaosrun runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .lines()
        .rfind(|l| l.contains(" passed, "))
        .unwrap_or("no summary")
        .to_string();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    (out.status.code().unwrap_or(-1), summary, self_rss(&stderr))
}

fn heavy_rows(bin: &Path, dir: &Path) {
    let t = Instant::now();
    let agent = repo().join("benches/heavy/agent.yaml");
    let agent = agent.to_str().expect("UTF-8 path");
    let (code, summary, own) = table_run(
        bin,
        dir,
        &repo().join("scenarios.yaml"),
        &["--agent", agent],
    );
    println!(
        "  55 rows at once, ~1 MB requests   exit {code}  {summary:<22} {:>5.1} s   chaosrun peak rss {:>6} MB   target < {RSS_TARGET_MB} MB   {}",
        t.elapsed().as_secs_f64(),
        own.map_or("?".into(), |v| format!("{v:.1}")),
        verdict(own.is_some_and(|v| v < RSS_TARGET_MB)),
    );
    let _ = std::io::stdout().flush();
}

/// A cassette of about 49 MB: 200 entries answering any user message with
/// `done {{nonce}}`, each with a recorded request of 60 messages of 4 KB.
/// Written a line at a time: a process's peak RSS carries over a fork and
/// exec, so the bench itself never holds the file.
fn big_cassette(path: &Path) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("cassette file"));
    writeln!(out, "{{\"cassette\":1,\"wire\":\"openai-chat\"}}").expect("written");
    let history: Vec<serde_json::Value> = (0..60)
        .map(|i| {
            serde_json::json!({"role": if i % 2 == 0 { "user" } else { "assistant" },
            "content": format!("turn {i}: {}", "r".repeat(4000)), "content_chars": 4009})
        })
        .collect();
    for call in 0..200 {
        let entry = serde_json::json!({
            "call": call,
            "match": {"role": "user"},
            "status": 200,
            "events": [{"type": "text", "at": 0.0, "text": "done {{nonce}}"},
                       {"type": "finish", "at": 0.0, "reason": "stop"}],
            "request": history,
        });
        writeln!(out, "{entry}").expect("cassette written");
    }
    out.flush().expect("cassette written");
}

fn cassette_rows(bin: &Path, dir: &Path, tape: &Path, rows: usize) -> Option<f64> {
    let mut table = String::from(
        "defaults:\n  knobs: {stale_timeout: 3, request_timeout: 5, api_max_retries: 1, max_turns: 4, tool_timeout: 3}\n  deadlines: {boot: 20, turn: 30, interrupt: 5, probe: 20, exit: 5, reap: 3}\nscenarios:\n",
    );
    for n in 0..rows {
        table.push_str(&format!(
            "  - id: replayed_{n}\n    about: an answer replayed from the shared cassette\n    responder:\n      - reply: {{kind: cassette, file: '{}'}}\n    expect: {{answer: \"done {{{{nonce}}}}\"}}\n    calls: {{max: 2}}\n",
            tape.display()
        ));
    }
    let path = dir.join(format!("cassette_{rows}.yaml"));
    std::fs::write(&path, table).expect("table written");
    let t = Instant::now();
    let (code, summary, own) = table_run(bin, dir, &path, &[]);
    println!(
        "  {rows} row(s) on one {:.0} MB cassette   exit {code}  {summary:<22} {:>5.1} s   chaosrun peak rss {:>6} MB   target < {RSS_TARGET_MB} MB   {}",
        std::fs::metadata(tape).map_or(0.0, |m| m.len() as f64 / 1e6),
        t.elapsed().as_secs_f64(),
        own.map_or("?".into(), |v| format!("{v:.1}")),
        verdict(own.is_some_and(|v| v < RSS_TARGET_MB)),
    );
    let _ = std::io::stdout().flush();
    own
}

fn shared_cassette(bin: &Path, dir: &Path) {
    let tape = dir.join("big.jsonl");
    big_cassette(&tape);
    let one = cassette_rows(bin, dir, &tape, 1);
    let six = cassette_rows(bin, dir, &tape, 6);
    if let (Some(one), Some(six)) = (one, six) {
        println!("  six rows hold {:+.1} MB over one", six - one);
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken from argv.
    let bin = chaosrun_bin();
    assert!(bin.is_file(), "no chaosrun binary at {}", bin.display());
    let dir = tempfile::tempdir().expect("temp dir");
    let only: Option<Vec<String>> = std::env::var("CHAOSRUN_BENCH_ONLY")
        .ok()
        .map(|v| v.split(',').map(str::to_string).collect());
    let wanted = |s: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == s));
    if wanted("floods") {
        let modes: Vec<String> = std::env::var("CHAOSRUN_BENCH_FLOOD_MODES")
            .map(|v| v.split(',').map(str::to_string).collect())
            .unwrap_or_else(|_| MODES.iter().map(|m| m.to_string()).collect());
        println!("hostile floods (tests/fixtures/agents/hostile_flood.py):");
        for m in &modes {
            flood(&bin, dir.path(), m);
        }
    }
    if wanted("serve") {
        let n: u64 = env_or("CHAOSRUN_BENCH_SERVE_REQUESTS", 10_000);
        println!("chaosrun serve, requests of 2.5 MB:");
        serve(&bin, n);
    }
    if wanted("mcp") {
        println!("chaosrun serve --mcp, hostile MCP clients:");
        mcp_floods(&bin);
    }
    if wanted("heavy") {
        println!("heavy rows (benches/heavy/agent.py on scenarios.yaml):");
        heavy_rows(&bin, dir.path());
    }
    if wanted("cassette") {
        println!("a shared cassette:");
        shared_cassette(&bin, dir.path());
    }
}
