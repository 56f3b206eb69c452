//! A hostile agent floods chaosrun (`tests/fixtures/agents/hostile_flood.py`):
//! 1 GiB of stderr, a 100 MB event line, 10^6 events, a closed stdout, a huge
//! journal, a huge log. Each mode must end with the right verdict (never a
//! hang), leave nothing running (found by an argv marker in /proc, not by the
//! tag), keep chaosrun's peak RSS under 64 MB, and keep each of stdout.log and
//! stderr.log within its 16 MiB cap.
//!
//! The MCP server is flooded too, on both transports (`support/mcp_flood.rs`,
//! shared with `cargo bench --bench memory`): a stdio client that writes
//! 300k `tools/call` and never reads (chaosrun stops reading it), one that
//! writes 400k pings and reads (every one answered), and 2 × 60 hung
//! Streamable HTTP calls with 7 MB arguments whose clients disconnect (the
//! second round gets through only if the first round's state was dropped).
//!
//! The RSS is measured from outside: `wait4` on the chaosrun process gives the
//! peak RSS of it and of every descendant it waited for (the fixture writes in
//! 1 MiB chunks, so it stays small): an upper bound of chaosrun's own.

mod common;
#[path = "support/mcp_flood.rs"]
mod mcp_flood;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, new_mark, read_json, repo};
use serde_json::Value;

const RSS_LIMIT_KB: i64 = 64 * 1024;
const LOG_CAP: u64 = 16 << 20;
/// The table's deadlines add up to about a minute; a run past this hangs.
const RUN_LIMIT: Duration = Duration::from_secs(180);

struct Run {
    code: Option<i32>,
    max_rss_kb: i64,
    stdout: String,
    stderr: String,
    report: Value,
    /// The scenario's artifacts (kept with --keep-all).
    art: PathBuf,
    marker: String,
    _dir: tempfile::TempDir,
}

impl Run {
    fn check(&self, name: &str) -> &Value {
        self.report["scenarios"][0]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("check {name} in {}", self.report))
    }

    fn violations(&self, name: &str) -> String {
        self.check(name)["violations"].to_string()
    }

    fn observation(&self) -> Value {
        read_json(&self.art.join("observation.json"))
    }

    fn context(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr)
    }
}

/// Live processes whose command line carries `marker`.
fn with_marker(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmd.is_empty() || !cmd.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next());
        if matches!(state, Some("Z") | None) {
            continue;
        }
        out.push(format!(
            "{pid}: {}",
            String::from_utf8_lossy(&cmd).replace('\0', " ")
        ));
    }
    out
}

fn kill_marked(marker: &str) {
    for p in with_marker(marker) {
        if let Some(pid) = p.split(':').next().and_then(|s| s.parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Wait for `pid` with a deadline; its exit code and peak RSS (KiB, of it and
/// its waited-for descendants). None on timeout.
fn wait4_within(pid: i32, limit: Duration) -> Option<(Option<i32>, i64)> {
    let deadline = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: plain wait4 on our own child, with valid out-pointers.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
            return Some((code, usage.ru_maxrss));
        }
        assert!(r == 0, "wait4 failed: {}", std::io::Error::last_os_error());
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run(mode: &str) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let marker = new_mark(&format!("floodmark-{mode}"));
    let art = dir.path().join("art");
    let json = dir.path().join("report.json");
    let agent = repo().join("tests/fixtures/agents/hostile_flood.py");
    let table = repo().join("tests/fixtures/flood_table.yaml");
    let out_path = dir.path().join("stdout.txt");
    let err_path = dir.path().join("stderr.txt");
    let child = Command::new(bin())
        .arg(&table)
        .arg("--agent")
        .arg(&agent)
        .arg(format!("--agent-arg=--mode={mode}"))
        .arg(format!("--agent-arg=--marker={marker}"))
        .arg("--keep-all")
        .arg("--artifacts")
        .arg(&art)
        .arg("--json")
        .arg(&json)
        .arg("--no-progress")
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("chaosrun starts");
    let pid = child.id() as i32;
    // `child` is reaped by wait4 below, never by std.
    let waited = wait4_within(pid, RUN_LIMIT);
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let Some((code, max_rss_kb)) = waited else {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = wait4_within(pid, Duration::from_secs(10));
        kill_marked(&marker);
        panic!("chaosrun hung past {RUN_LIMIT:?} with --mode={mode}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    };
    drop(child);
    eprintln!("--mode={mode}: peak RSS {max_rss_kb} KiB (chaosrun and its waited children)");
    let report = read_json(&json);
    Run {
        code,
        max_rss_kb,
        stdout,
        stderr,
        report,
        art: art.join("flood"),
        marker,
        _dir: dir,
    }
}

/// What every mode must keep: nothing left running, RSS and logs in bounds.
fn bounded(r: &Run) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let left = loop {
        let left = with_marker(&r.marker);
        if left.is_empty() || Instant::now() >= deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    kill_marked(&r.marker);
    assert!(left.is_empty(), "left running: {left:?}\n{}", r.context());
    assert!(
        r.max_rss_kb < RSS_LIMIT_KB,
        "peak RSS of chaosrun (and its waited children) {} KiB, limit {RSS_LIMIT_KB} KiB\n{}",
        r.max_rss_kb,
        r.context()
    );
    for log in ["stdout.log", "stderr.log"] {
        let len = std::fs::metadata(r.art.join(log)).map_or(0, |m| m.len());
        assert!(len <= LOG_CAP, "{log} kept {len} bytes, cap {LOG_CAP}");
    }
    assert!(!r.stderr.contains("panicked"), "{}", r.context());
}

fn capped(r: &Run, field: &str) -> u64 {
    r.observation()["capped"][field].as_u64().unwrap()
}

#[test]
fn stderr_flood_is_drained_and_capped() {
    let r = run("stderr_flood");
    bounded(&r);
    assert_eq!(r.code, Some(0), "{}", r.context());
    assert_eq!(capped(&r, "stderr_bytes"), 1 << 30);
    assert_eq!(capped(&r, "stderr_kept"), LOG_CAP);
    let len = std::fs::metadata(r.art.join("stderr.log")).unwrap().len();
    assert_eq!(len, LOG_CAP);
    assert!(
        r.stdout.contains("[stderr: 1.0 GiB, 16 MiB kept]"),
        "{}",
        r.context()
    );
}

#[test]
fn a_huge_event_line_is_a_protocol_violation() {
    let r = run("huge_event_line");
    bounded(&r);
    assert_eq!(r.code, Some(1), "{}", r.context());
    assert_eq!(r.check("protocol")["status"], "fail");
    assert!(
        r.violations("protocol")
            .contains("a line of 104857640 bytes"),
        "{}",
        r.violations("protocol")
    );
    // The rest of the run went on: the agent's turns were judged.
    assert_eq!(r.check("faulted_turn_ends")["status"], "pass");
}

#[test]
fn an_event_flood_is_cut_at_the_cap_and_fails_protocol() {
    let r = run("event_flood");
    bounded(&r);
    assert_eq!(r.code, Some(1), "{}", r.context());
    assert!(
        r.violations("protocol")
            .contains("events past chaosrun's cap of 10000"),
        "{}",
        r.violations("protocol")
    );
    let obs = r.observation();
    let events = obs["events"].as_array().unwrap().len();
    assert!(events <= 10_000 + 10, "{events} events recorded");
    assert!(capped(&r, "events_dropped") >= 990_000);
}

#[test]
fn an_agent_that_closes_stdout_is_killed_and_reported() {
    let r = run("closes_stdout");
    bounded(&r);
    assert_eq!(r.code, Some(1), "{}", r.context());
    assert!(
        r.violations("faulted_turn_ends")
            .contains("closed its stdout"),
        "{}",
        r.violations("faulted_turn_ends")
    );
    let obs = r.observation();
    let exited = obs["events"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|e| e["ev"] == "exited")
        .cloned()
        .expect("an exit is recorded");
    assert_eq!(exited["killed_by_chaosrun"], true, "{exited}");
    assert_eq!(exited["signal"], 9, "{exited}");
}

#[test]
fn a_huge_journal_is_read_up_to_its_cap() {
    let r = run("journal_flood");
    bounded(&r);
    assert_eq!(r.code, Some(0), "{}", r.context());
    assert_eq!(capped(&r, "journal_bytes"), 128 << 20);
    assert!(capped(&r, "journal_read") <= 4 << 20);
    let lines = r.observation()["journal"].as_array().unwrap().len();
    assert_eq!(lines, 10_000);
}

#[test]
fn a_huge_log_is_tailed_from_its_end() {
    let r = run("log_flood");
    bounded(&r);
    assert_eq!(r.code, Some(0), "{}", r.context());
    let obs = r.observation();
    let tails = obs["log_tails"].as_array().unwrap();
    assert_eq!(tails.len(), 1, "{tails:?}");
    let tail = tails[0][1].as_str().unwrap();
    assert_eq!(tail.lines().count(), 20);
    assert!(tail.len() < 64 * 1024);
}

/// The recording `serve --mcp` printed, checked for its bounds.
fn bounded_recording(rec: &Value) -> u64 {
    let kept = rec["exchanges"].as_array().map_or(0, Vec::len);
    assert!(kept <= 2000, "{kept} exchanges kept");
    rec["dropped"].as_u64().unwrap() + kept as u64
}

fn serve_rss_bounded(s: &mcp_flood::Stopped, what: &str) {
    eprintln!(
        "{what}: serve --mcp peak RSS {} KiB, exit {:?} {:.2} s after SIGTERM",
        s.max_rss_kb, s.code, s.exit_seconds
    );
    assert_eq!(s.code, Some(0), "{what}: serve exits 0 on SIGTERM");
    assert!(
        s.max_rss_kb < RSS_LIMIT_KB,
        "{what}: peak RSS of chaosrun serve --mcp {} KiB, limit {RSS_LIMIT_KB} KiB",
        s.max_rss_kb
    );
}

#[test]
fn an_mcp_stdio_client_that_floods_calls_and_never_reads_is_backpressured() {
    let served = mcp_flood::serve(&bin(), "rules: []\n");
    let flood = mcp_flood::stdio_calls_unread(&bin(), &served, 300_000, Duration::from_secs(3));
    eprintln!(
        "stdio unread: {} calls written, blocked: {}",
        flood.sent, flood.blocked
    );
    // chaosrun stopped reading: the client's pipe stayed full long before
    // 300k (the flood waits in the kernel's buffers, not in chaosrun).
    assert!(flood.blocked && flood.sent < 300_000, "sent {}", flood.sent);
    let stopped = served.stop(Duration::from_secs(10));
    serve_rss_bounded(&stopped, "300k unread tools/call");
    let rec = &stopped.recording;
    let calls = rec["tool_calls"].as_u64().unwrap();
    assert!(
        calls >= 64 && calls <= flood.sent,
        "{calls} of {} calls",
        flood.sent
    );
    assert_eq!(
        bounded_recording(rec),
        calls,
        "every call recorded or counted"
    );
    // The relay exits once the server is gone (its unread pipe closed).
    let exit = mcp_flood::end_relay(flood.relay, Duration::from_secs(10));
    assert!(exit.is_some(), "the relay outlived the server");
}

#[test]
fn an_mcp_stdio_client_that_floods_pings_and_reads_gets_every_answer() {
    let served = mcp_flood::serve(&bin(), "rules: []\n");
    let p = mcp_flood::stdio_pings_read(&bin(), &served, 400_000, Duration::from_secs(300));
    eprintln!(
        "stdio pings: {} sent, {} answered in {:.1} s",
        p.sent, p.answered, p.seconds
    );
    assert_eq!((p.sent, p.answered), (400_000, 400_000));
    assert_eq!(
        p.relay_exit.map(|s| s.code()),
        Some(Some(0)),
        "the relay exits 0 on stdin EOF"
    );
    let stopped = served.stop(Duration::from_secs(10));
    serve_rss_bounded(&stopped, "400k read pings");
    // Every ping, and the note that the relay's stdin closed.
    assert_eq!(bounded_recording(&stopped.recording), 400_001);
}

#[test]
fn hung_mcp_http_calls_with_huge_arguments_are_dropped_when_their_clients_leave() {
    let served = mcp_flood::serve(&bin(), "rules: [{reply: {kind: hang}}]\n");
    let sid = mcp_flood::http_initialize(served.port);
    // 60 calls of 7 MB, then 8 more of 1 MB, against a limit of 64 calls in
    // flight per session: the 8 get in only because the first 60 calls
    // ended with their clients.
    let t = Instant::now();
    let ok = mcp_flood::http_hung_calls(served.port, &sid, 60, 7 << 20, Duration::from_secs(120));
    assert_eq!(ok, 60, "calls in flight");
    eprintln!(
        "60 hung calls of 7 MB in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let ok = mcp_flood::http_hung_calls(served.port, &sid, 8, 1 << 20, Duration::from_secs(60));
    assert_eq!(ok, 8, "calls in flight after the first 60 left");
    let stopped = served.stop(Duration::from_secs(10));
    serve_rss_bounded(&stopped, "2 × 60 hung HTTP calls of 7 MB");
    let rec = &stopped.recording;
    assert_eq!(
        (rec["tool_calls"].as_u64(), rec["http_sessions"].as_u64()),
        (Some(68), Some(1))
    );
    let hung = rec["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "hang" && e["answered"].is_null())
        .count();
    assert_eq!(hung, 68);
}
