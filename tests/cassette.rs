//! Record and replay, end to end with real processes on 127.0.0.1:
//!
//! * a table run in proxy mode against `chaosrun serve` behind TLS (a CA made
//!   at test time) with `--record DIR` writes one readable cassette per row:
//!   the tool call and the text chunks with their timing, the nonce as
//!   `{{nonce}}`, and no credential;
//! * the same table with `--replay DIR` and no upstream running gives the same
//!   verdicts, on the wire it was recorded on and on the three others;
//! * replayed with a 429 storm from call 2 (a row rule before the cassette),
//!   the row has that fault's verdict; with a stall applied to the replayed
//!   stream, the agent's stale timeout is what ends the call;
//! * a call the cassette does not cover is an ERROR naming it; a malformed
//!   cassette is exit 2 naming FILE:LINE.

mod common;
#[path = "support/upstreams.rs"]
mod upstreams;

use common::*;
use std::path::Path;
use std::time::Duration;
use upstreams::*;

const TABLE: &str = "tests/fixtures/cassette/table.yaml";
const SECRET: &str = "sk-cassette-5ecret-never-recorded";

fn verdicts(report: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_string(),
                s["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Run a table; the report.
fn run(mark: &str, json: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["--json", json.to_str().unwrap()]);
    let out = chaosrun(mark, &all);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    read_json(json)
}

/// Record the fixture table through a TLS proxy into `dir/rec`; the verdicts.
fn record(mark: &str, dir: &Path) -> std::collections::BTreeMap<String, String> {
    let ca = Ca::new(dir, "rec");
    let (leaf, key) = ca.leaf(&["127.0.0.1"], false);
    let up = Serve::start(
        &bin(),
        &repo(),
        &[
            "--quiet",
            "--script",
            "tests/fixtures/cassette/upstream.yaml",
        ],
    );
    let tls = tls_terminator(up.addr(), &leaf, &key);
    let url = format!("https://127.0.0.1:{}/v1", tls.port());
    let rec = dir.join("rec");
    let mut cmd = command(
        mark,
        &[
            TABLE,
            "--upstream",
            &url,
            "--upstream-ca",
            ca.pem_file.to_str().unwrap(),
            "--upstream-key-env",
            "CHAOS_CASSETTE_KEY",
            "--pass-env",
            "CHAOS_CASSETTE_KEY",
            "--record",
            rec.to_str().unwrap(),
            "--json",
            dir.join("recorded.json").to_str().unwrap(),
        ],
    );
    let out = cmd.env("CHAOS_CASSETTE_KEY", SECRET).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let summary = up.stop();
    assert!(
        summary.contains("main 4,"),
        "every main call went upstream: {summary}"
    );
    verdicts(&read_json(&dir.join("recorded.json")))
}

#[test]
fn a_recorded_session_replays_with_the_same_verdicts_on_every_wire_and_takes_faults() {
    let dir = tempfile::tempdir().unwrap();
    let mark = new_mark("cassette");
    let recorded = record(&mark, dir.path());
    assert_eq!(recorded.len(), 2);
    assert!(recorded.values().all(|v| v == "pass"), "{recorded:?}");

    // What landed on disk: one readable cassette per row.
    let rec = dir.path().join("rec");
    let text = std::fs::read_to_string(rec.join("conversation_with_a_tool.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "header + 2 calls: {text}");
    assert_eq!(lines[0]["cassette"], 1);
    assert_eq!(lines[0]["wire"], "openai-chat");
    let first = lines[1]["events"].to_string();
    assert!(
        first.contains("\"tool_call\"") && first.contains("echo recorded-tool-output"),
        "{first}"
    );
    assert_eq!(lines[2]["match"]["role"], "tool");
    assert!(lines[2]["match"]["text"]
        .as_str()
        .unwrap()
        .contains("recorded-tool-output"));
    let texts: Vec<&serde_json::Value> = lines[2]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "text")
        .collect();
    assert!(texts.len() >= 3, "the chunks are kept: {text}");
    assert!(
        texts.last().unwrap()["at"].as_f64().unwrap() > 0.05,
        "with their timing: {text}"
    );
    let mut all = String::new();
    for e in std::fs::read_dir(&rec).unwrap().flatten() {
        all.push_str(&std::fs::read_to_string(e.path()).unwrap());
    }
    assert!(!all.contains(SECRET), "the key was recorded");

    // Replay with no upstream at all, on every wire: the recorded verdicts.
    let rec_s = rec.to_str().unwrap().to_string();
    let reports: Vec<(String, serde_json::Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = ["openai-chat", "openai-responses", "anthropic", "gemini"]
            .into_iter()
            .map(|wire| {
                let (mark, dir, rec) = (&mark, dir.path(), &rec_s);
                s.spawn(move || {
                    let json = dir.join(format!("replay-{wire}.json"));
                    let r = run(mark, &json, &[TABLE, "--replay", rec, "--wire", wire]);
                    (wire.to_string(), r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (wire, report) in &reports {
        let v = verdicts(report);
        for (id, verdict) in &v {
            assert_eq!(
                Some(verdict),
                recorded.get(id),
                "{wire} {id}: {:?}",
                violations(report, id)
            );
        }
        let sc = scenario(report, "conversation_with_a_tool");
        assert_eq!(sc["calls"]["main"], 2, "{wire}: {sc}");
    }

    // The recorded conversation with a 429 storm from call 2 on.
    let json = dir.path().join("storm.json");
    let storm = run(
        &mark,
        &json,
        &["tests/fixtures/cassette/faults.yaml", "--replay", &rec_s],
    );
    let sc = scenario(&storm, "conversation_with_a_tool");
    assert_eq!(
        sc["verdict"],
        "pass",
        "{:?}",
        violations(&storm, "conversation_with_a_tool")
    );
    let main = sc["calls"]["main"].as_u64().unwrap();
    assert!(
        main >= 2,
        "call 1 came from the cassette, then the storm: {sc}"
    );

    // A stall applied to the replayed stream: only the agent's stale timeout
    // ends the call, and the bug that removes it is caught.
    let cassette = rec.join("conversation_with_a_tool.jsonl");
    let stall_table = dir.path().join("stall.yaml");
    std::fs::write(
        &stall_table,
        std::fs::read_to_string(repo().join(TABLE))
            .unwrap()
            .split("\nscenarios:")
            .next()
            .unwrap()
            .to_string()
            + &format!(
                "\nscenarios:\n  - id: conversation_with_a_tool\n    about: the real answer, stalled after its first event\n    knobs: {{request_timeout: 600}}\n    deadlines: {{turn: 30}}\n    responder:\n      - reply: {{kind: cassette, file: \"{}\", fault: {{kind: stall_after_events, events: 1}}}}\n    expect: error\n    probe: breaker\n",
                cassette.display()
            ),
    )
    .unwrap();
    let stall = stall_table.to_str().unwrap();
    let ok = run(&mark, &dir.path().join("stall.json"), &[stall]);
    assert_eq!(
        scenario(&ok, "conversation_with_a_tool")["verdict"],
        "pass",
        "{}",
        scenario(&ok, "conversation_with_a_tool")
    );
    let bug = run(
        &mark,
        &dir.path().join("stall-bug.json"),
        &[stall, "--agent-arg=--bug=no_stale_timeout"],
    );
    assert_eq!(
        scenario(&bug, "conversation_with_a_tool")["verdict"],
        "fail"
    );
    assert!(failed_invariants(&bug, "conversation_with_a_tool")
        .iter()
        .any(|i| i == "termination"));

    // A conversation the cassette does not cover: an ERROR naming the call.
    let edited = text.replace("recorded-tool-output\"", "something-else\"");
    let miss_dir = dir.path().join("miss");
    std::fs::create_dir(&miss_dir).unwrap();
    std::fs::write(miss_dir.join("conversation_with_a_tool.jsonl"), &edited).unwrap();
    std::fs::write(
        miss_dir.join("another_conversation.jsonl"),
        std::fs::read_to_string(rec.join("another_conversation.jsonl")).unwrap(),
    )
    .unwrap();
    let miss = run(
        &mark,
        &dir.path().join("miss.json"),
        &[
            TABLE,
            "--replay",
            miss_dir.to_str().unwrap(),
            "--only",
            "conversation_with_a_tool",
        ],
    );
    let sc = scenario(&miss, "conversation_with_a_tool");
    assert_eq!(sc["verdict"], "error", "{sc}");
    let cause = sc["cause"].as_str().unwrap();
    assert!(cause.contains("no entry for main call 1"), "{cause}");

    let survivors = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(survivors.is_empty(), "left behind: {survivors:?}");
}

#[test]
fn a_malformed_or_missing_cassette_is_a_usage_error_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec");
    std::fs::create_dir(&rec).unwrap();
    let mark = new_mark("cassette-bad");
    std::fs::write(
        rec.join("conversation_with_a_tool.jsonl"),
        "{\"cassette\":1,\"wire\":\"openai-chat\"}\n{\"call\":0,\"match\":{\"role\":\"user\"},\"status\":200}\n{\"call\":1,\"status\":\"x\"}\n",
    )
    .unwrap();
    let out = chaosrun(
        &mark,
        &[
            TABLE,
            "--replay",
            rec.to_str().unwrap(),
            "--only",
            "conversation_with_a_tool",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("conversation_with_a_tool.jsonl:3: "), "{err}");
    // A row without a cassette.
    let out = chaosrun(&mark, &[TABLE, "--replay", rec.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no cassette for scenario `another_conversation`"),
        "{err}"
    );
    // --record without an upstream.
    let out = chaosrun(&mark, &[TABLE, "--record", rec.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("needs an upstream"), "{err}");
}

/// `chaosrun serve --upstream URL --record FILE`: the proxy on its own
/// writes the relayed main calls when it is stopped.
#[test]
fn serve_records_a_cassette_when_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("serve.jsonl");
    let up = Serve::start(
        &bin(),
        &repo(),
        &[
            "--quiet",
            "--wire",
            "anthropic",
            "--script",
            "tests/fixtures/cassette/upstream.yaml",
        ],
    );
    let upstream = up.url.trim_end_matches("/v1").to_string();
    let proxy = Serve::start(
        &bin(),
        &repo(),
        &[
            "--quiet",
            "--wire",
            "anthropic",
            "--upstream",
            &upstream,
            "--record",
            file.to_str().unwrap(),
        ],
    );
    let base = proxy.url.trim_end_matches("/v1").to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let body = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("{base}/v1/messages"))
            .header("content-type", "application/json")
            .body(r#"{"model":"m","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"go"}],"tools":[{"name":"shell","input_schema":{}}]}"#)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    assert!(body.contains("\"tool_use\""), "{body}");
    proxy.stop();
    let c = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<serde_json::Value> = c
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{c}");
    assert_eq!(lines[0]["wire"], "anthropic");
    assert_eq!(lines[1]["match"]["text"], "go");
    let call = lines[1]["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "tool_call")
        .unwrap_or_else(|| panic!("{c}"));
    assert!(call["arguments"]
        .as_str()
        .unwrap()
        .contains("echo recorded-tool-output"));
    drop(up);
}

/// Issue 48 item 5: what the cassette must not hold.
const ECHO_KEY: &str = "sk-echoed-upstream-key-4b7e21";
const PROMPT_SECRET: &str = "pass-env-value-in-prompt-9c3d";

/// An upstream on 127.0.0.1 (openai-chat) that echoes the request's
/// Authorization header: its first call answers 429 with the header in the
/// error body (when `first_429`), every other one streams it back as answer
/// text cut in two chunks in the middle of the key (the liveness probe is
/// answered).
fn echoing_upstream(first_429: bool) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let calls = calls.clone();
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
                let auth = field("authorization");
                let body = String::from_utf8_lossy(&body).to_string();
                // The liveness probe (relayed too) gets its answer.
                let probe = body
                    .split("[[probe:")
                    .nth(1)
                    .and_then(|r| r.split("]]").next());
                let chunk = |t: &str| {
                    format!(
                        "data: {}\n\n",
                        serde_json::json!({"choices": [{"index": 0, "delta": {"content": t}}]})
                    )
                };
                let finish = serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
                let stream = |chunks: String| {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{chunks}data: {finish}\n\ndata: [DONE]\n\n"
                    )
                };
                if let Some(nonce) = probe {
                    let _ = conn.write_all(stream(chunk(&format!("alive {nonce}"))).as_bytes());
                    return;
                }
                if first_429 && calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    let echo = serde_json::json!({"error": {
                        "message": format!("slow down, {auth}"), "type": "rate_limit"}})
                    .to_string();
                    let _ = write!(
                        conn,
                        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{echo}",
                        echo.len()
                    );
                    return;
                }
                let cut = auth.len() - ECHO_KEY.len() / 2;
                let chunks = chunk(&format!("you sent {}", &auth[..cut]))
                    + &chunk(&format!("{} back", &auth[cut..]));
                let _ = conn.write_all(stream(chunks).as_bytes());
            });
        }
    });
    port
}

fn holds(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The one-shot exec fixture with a `--pass-env` value in its prompt.
fn prompt_leaking_agent(dir: &Path) -> std::path::PathBuf {
    let fixtures = repo().join("tests/fixtures/agents");
    let text = std::fs::read_to_string(fixtures.join("oneshot_cli.yaml"))
        .unwrap()
        .replace("{{profile_dir}}", fixtures.to_str().unwrap())
        .replace(
            "\"{{message}}\"",
            "\"{{message}} token={{env:CHAOS_CASSETTE_PROMPT}}\"",
        );
    assert!(text.contains("token={{env:"), "{text}");
    let p = dir.join("leaky.yaml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_recorded_cassette_holds_no_secret_and_still_replays() {
    let dir = tempfile::tempdir().unwrap();
    let port = echoing_upstream(false);
    let agent = prompt_leaking_agent(dir.path());
    let table = dir.path().join("t.yaml");
    std::fs::write(
        &table,
        "defaults:\n  knobs: {model: m, stale_timeout: 5, request_timeout: 5, api_max_retries: 2, max_turns: 4, tool_timeout: 3}\n  deadlines: {boot: 60, turn: 60, interrupt: 15, probe: 30, exit: 30, reap: 10}\nscenarios:\n  - id: echoed\n    about: the upstream echoes its key, the prompt holds a --pass-env value\n    responder: [{reply: {kind: relay}}]\n    expect: ended\n    calls: {exactly: 1}\n",
    )
    .unwrap();
    let rec = dir.path().join("rec");
    let mark = new_mark("cassette-secrets");
    let upstream = format!("http://127.0.0.1:{port}/v1");
    let args = |extra: &[&str]| {
        let mut a: Vec<String> = vec![
            table.display().to_string(),
            "--agent".into(),
            agent.display().to_string(),
            "--pass-env".into(),
            "CHAOS_CASSETTE_PROMPT".into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let mut rec_args = args(&[
        "--upstream-key-env",
        "CHAOS_CASSETTE_ECHO_KEY",
        "--pass-env",
        "CHAOS_CASSETTE_ECHO_KEY",
        "--upstream",
    ]);
    rec_args.extend([upstream, "--record".into(), rec.display().to_string()]);
    let run = |a: Vec<String>| {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let out = command(&mark, &refs)
            .env("CHAOS_CASSETTE_ECHO_KEY", ECHO_KEY)
            .env("CHAOS_CASSETTE_PROMPT", PROMPT_SECRET)
            .output()
            .unwrap();
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let (code, text) = run(rec_args);
    assert_eq!(code, Some(0), "{text}");
    let bytes = std::fs::read(rec.join("echoed.jsonl")).unwrap();
    let shown = String::from_utf8_lossy(&bytes).to_string();
    let lines: Vec<serde_json::Value> = shown
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "header, the answer: {shown}\n{text}");
    for secret in [ECHO_KEY, PROMPT_SECRET] {
        assert!(!holds(&bytes, secret), "{secret} in the cassette:\n{shown}");
        // Nor a long piece of it (the key streamed in two chunks).
        let half = &secret[..secret.len() / 2 + 2];
        let tail = &secret[secret.len() / 2 - 2..];
        assert!(
            !holds(&bytes, half) && !holds(&bytes, tail),
            "half of {secret} in the cassette:\n{shown}"
        );
    }
    // The echoes were there, redacted: in the answer text (its two chunks
    // joined), the match text and the request.
    assert_eq!(
        lines[1]["events"][0]["text"],
        "you sent Bearer <redacted> back"
    );
    let key = lines[1]["match"]["text"].as_str().unwrap();
    assert!(key.ends_with("token=<redacted>"), "{key}");
    let request = lines[1]["request"].to_string();
    assert!(request.contains("token=<redacted>"), "{request}");

    // Replayed with no upstream: the same verdict.
    let (code, text) = run(args(&["--replay", rec.to_str().unwrap()]));
    assert_eq!(code, Some(0), "replay: {text}");
    assert!(text.contains("PASS"), "{text}");
    kill_marked(&mark);
}

/// `serve --upstream --upstream-key-env --record`: an upstream that echoes
/// the key in a 429 body and then in a streamed answer leaves it in neither
/// entry (the client reads each reply whole, so both are recorded).
#[test]
fn serve_records_no_echoed_key_from_an_error_or_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("serve.jsonl");
    let port = echoing_upstream(true);
    let upstream = format!("http://127.0.0.1:{port}/v1");
    let proxy = Serve::start_with_env(
        &bin(),
        &repo(),
        &[
            "--quiet",
            "--upstream",
            &upstream,
            "--upstream-key-env",
            "CHAOS_SERVE_ECHO_KEY",
            "--record",
            file.to_str().unwrap(),
        ],
        &[("CHAOS_SERVE_ECHO_KEY", ECHO_KEY)],
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let answers = rt.block_on(async {
        let mut out = Vec::new();
        for _ in 0..2 {
            let r = reqwest::Client::new()
                .post(format!("{}/chat/completions", proxy.url))
                .header("content-type", "application/json")
                .body(r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"go"}],"tools":[{"type":"function","function":{"name":"shell","parameters":{}}}]}"#)
                .send()
                .await
                .unwrap();
            out.push((r.status().as_u16(), r.text().await.unwrap()));
        }
        out
    });
    // The client got the upstream's echo as it was.
    assert_eq!(answers[0].0, 429, "{answers:?}");
    assert!(answers[0].1.contains(ECHO_KEY), "{answers:?}");
    proxy.stop();
    let bytes = std::fs::read(&file).unwrap();
    let shown = String::from_utf8_lossy(&bytes).to_string();
    assert!(
        !holds(&bytes, ECHO_KEY),
        "the key in the cassette:\n{shown}"
    );
    let lines: Vec<serde_json::Value> = shown
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "header, the 429, the answer: {shown}");
    assert_eq!(lines[1]["status"], 429, "{shown}");
    let error = lines[1]["error"].as_str().unwrap();
    assert!(error.contains("Bearer <redacted>"), "{error}");
    assert_eq!(
        lines[2]["events"][0]["text"],
        "you sent Bearer <redacted> back"
    );
}

/// Run `chaosrun ARGS` in `cwd`, bounded (a serve that started would never
/// end, and fails the test): whether it succeeded, and its stderr.
fn bounded(cwd: &Path, args: &[&str]) -> (bool, String) {
    let mut cmd = std::process::Command::new(bin());
    cmd.args(args).current_dir(cwd);
    let (ok, _, err) = run_bounded(cmd, Duration::from_secs(30));
    (ok, err)
}

#[test]
fn serve_never_records_over_a_file_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = "- reply: {kind: text, text: hi}\n";
    std::fs::write(d.join("script.yaml"), script).unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::hard_link(d.join("script.yaml"), d.join("hard.yaml")).unwrap();
    std::os::unix::fs::symlink(d.join("script.yaml"), d.join("sym.yaml")).unwrap();
    let abs = d.join("script.yaml").display().to_string();
    for target in [
        "script.yaml",
        "sub/../script.yaml",
        "hard.yaml",
        &abs,
        "sym.yaml",
    ] {
        let (ok, err) = bounded(
            d,
            &[
                "serve",
                "--script",
                "script.yaml",
                "--upstream",
                "http://127.0.0.1:9/v1",
                "--record",
                target,
            ],
        );
        assert!(!ok, "{target}: {err}");
        assert!(
            err.contains("would overwrite") || err.contains("symbolic link"),
            "{target}: {err}"
        );
        assert_eq!(
            std::fs::read_to_string(d.join("script.yaml")).unwrap(),
            script
        );
    }
}

#[test]
fn a_run_never_records_over_its_table_or_a_cassette_it_replays() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec");
    std::fs::create_dir(&rec).unwrap();
    let mark = new_mark("cassette-overwrite");
    // The table is where its row's cassette would be written.
    let table = rec.join("row.jsonl");
    let table_text =
        "scenarios:\n  - id: row\n    responder: [{reply: {kind: relay}}]\n    expect: ended\n";
    std::fs::write(&table, table_text).unwrap();
    let up = "http://127.0.0.1:9/v1";
    let out = chaosrun(
        &mark,
        &[
            table.to_str().unwrap(),
            "--upstream",
            up,
            "--record",
            rec.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("would overwrite"), "{err}");
    assert_eq!(std::fs::read_to_string(&table).unwrap(), table_text);
    // A row that replays the very cassette --record would write.
    let cassette = rec.join("other.jsonl");
    let cassette_text = "{\"cassette\":1,\"wire\":\"openai-chat\"}\n{\"call\":0,\"match\":{\"role\":\"user\"},\"status\":200,\"events\":[{\"type\":\"text\",\"at\":0,\"text\":\"hi\"}]}\n";
    std::fs::write(&cassette, cassette_text).unwrap();
    let table = dir.path().join("t.yaml");
    std::fs::write(
        &table,
        format!(
            "scenarios:\n  - id: other\n    responder: [{{reply: {{kind: cassette, file: {}}}}}]\n    expect: ended\n",
            cassette.display()
        ),
    )
    .unwrap();
    let out = chaosrun(
        &mark,
        &[
            table.to_str().unwrap(),
            "--upstream",
            up,
            "--record",
            rec.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("would overwrite"), "{err}");
    assert_eq!(std::fs::read_to_string(&cassette).unwrap(), cassette_text);
    kill_marked(&mark);
}
