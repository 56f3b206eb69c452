//! Secret redaction (issue 18 item 4), end to end with real processes: a
//! hostile upstream written here, on 127.0.0.1, answers every relayed call
//! with a 400 whose body echoes the request's Authorization header (the
//! upstream key) and the password of the `--upstream http://user:PASS@…`
//! URL. A proxied run with `--json`, `--junit`, `--html`, `--history`,
//! `--artifacts --keep-all` must leave neither value in any file it wrote,
//! the history database included, nor on its stdout or stderr; the echoes
//! must show up as `<redacted>` (so the sinks did see them).

mod common;

use common::*;
use std::io::{Read, Write};

const KEY: &str = "sk-hostile-echo-key-93f1c2";
const PASS: &str = "url-pass-7d41b9";

/// An upstream that answers each request 400, echoing its auth header and
/// the URL password in the body (as some real APIs echo a bad key).
fn echoing_upstream() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
                    if conn.read(&mut b).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let field = |name: &str| {
                    head.lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                        })
                        .unwrap_or_default()
                };
                let len: usize = field("content-length").parse().unwrap_or(0);
                let mut body = vec![0u8; len];
                let _ = conn.read_exact(&mut body);
                let echo = serde_json::json!({"error": {
                    "message": format!("invalid key: {} (basic: {PASS})", field("authorization")),
                    "type": "invalid_request_error"}})
                .to_string();
                let _ = write!(
                    conn,
                    "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{echo}",
                    echo.len()
                );
            });
        }
    });
    port
}

/// Every file under `dir`, as bytes, with its path.
fn files(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if let Ok(b) = std::fs::read(&p) {
            out.push((p, b));
        }
    }
}

fn holds(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn an_echoed_key_and_a_url_password_reach_no_output() {
    let port = echoing_upstream();
    let mark = new_mark("redact");
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).display().to_string();
    let upstream = format!("http://user:{PASS}@127.0.0.1:{port}/v1");
    let out = command(
        &mark,
        &[
            "scenarios.yaml",
            "--only",
            "tool_args_garbage",
            "--upstream",
            &upstream,
            "--upstream-key-env",
            "CHAOS_REDACT_TEST_KEY",
            "--pass-env",
            "CHAOS_REDACT_TEST_KEY",
            "--json",
            &p("r.json"),
            "--junit",
            &p("r.xml"),
            "--html",
            &p("r.html"),
            "--history",
            &p("history.db"),
            "--artifacts",
            &p("art"),
            "--keep-all",
        ],
    )
    .env("CHAOS_REDACT_TEST_KEY", KEY)
    .output()
    .unwrap();
    kill_marked(&mark);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(matches!(out.status.code(), Some(1)), "{stdout}\n{stderr}");
    let mut all = Vec::new();
    files(dir.path(), &mut all);
    let names: Vec<String> = all.iter().map(|(p, _)| p.display().to_string()).collect();
    for must in [
        "r.json",
        "r.xml",
        "r.html",
        "history.db",
        "observation.json",
        "checks.json",
        "requests.jsonl",
    ] {
        assert!(
            names.iter().any(|n| n.ends_with(must)),
            "{must} written: {names:?}"
        );
    }
    for secret in [KEY, PASS] {
        let hits: Vec<&String> = all
            .iter()
            .zip(&names)
            .filter(|((_, b), _)| holds(b, secret))
            .map(|(_, n)| n)
            .collect();
        assert!(hits.is_empty(), "{secret} written to {hits:?}");
        assert!(!stdout.contains(secret), "{secret} on stdout:\n{stdout}");
        assert!(!stderr.contains(secret), "{secret} on stderr:\n{stderr}");
    }
    // The echo did reach the sinks, redacted.
    let redacted: Vec<&String> = all
        .iter()
        .zip(&names)
        .filter(|((_, b), _)| holds(b, "<redacted>"))
        .map(|(_, n)| n)
        .collect();
    assert!(
        redacted.iter().any(|n| n.ends_with("observation.json")),
        "the echoed key is in the observation, redacted: {redacted:?}"
    );
    assert!(
        stdout.contains("<redacted>") || redacted.iter().any(|n| n.ends_with("r.json")),
        "the report carries the redacted echo: {redacted:?}\n{stdout}"
    );
}

/// Issue 48 item 6: a key in the upstream URL's query is refused at load
/// (exit 2, pointing at --upstream-key-env), by a run and by serve, and is
/// printed nowhere; nothing is written.
#[test]
fn a_key_in_the_upstream_query_is_refused_and_never_printed() {
    const QUERY_KEY: &str = "query-key-5e1f0a77";
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mark = new_mark("redact-query");
    let upstream = format!("http://127.0.0.1:9/v1?key={QUERY_KEY}");
    let out = chaosrun(
        &mark,
        &[
            "scenarios.yaml",
            "--only",
            "tool_args_garbage",
            "--upstream",
            &upstream,
            "--json",
            json.to_str().unwrap(),
        ],
    );
    kill_marked(&mark);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("--upstream-key-env"), "{stderr}");
    assert!(!json.exists(), "nothing written");
    assert!(
        !stdout.contains(QUERY_KEY) && !stderr.contains(QUERY_KEY),
        "{stdout}\n{stderr}"
    );
    // serve would otherwise start and listen (bounded: a hang fails here).
    let mut cmd = std::process::Command::new(bin());
    cmd.args(["serve", "--upstream", &upstream]);
    let (ok, stdout, stderr) = run_bounded(cmd, std::time::Duration::from_secs(30));
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(stderr.contains("--upstream-key-env"), "{stderr}");
    assert!(
        !stdout.contains(QUERY_KEY) && !stderr.contains(QUERY_KEY),
        "{stdout}\n{stderr}"
    );
}
