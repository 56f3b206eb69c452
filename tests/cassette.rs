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
