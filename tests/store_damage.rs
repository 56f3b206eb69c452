//! Stores damaged between turns (process_faults.yaml's `store_damage_*`
//! rows, issue 44.2): the reference agent with its messages in a JSONL
//! transcript (examples/reference/agent-jsonl.yaml) passes every row on
//! every wire, `store_resumed_past_damage` made on each; each transcript bug
//! fails the rows that show it on that check alone, on every wire; on the
//! SQLite profile the rows are N/A, saying why.

mod common;

use common::*;

const ROWS: &str = "store_damage_truncate_last,store_damage_nul_tail,store_damage_fuse_records,store_damage_concurrent_append";

/// Every wire the provider and the reference agent speak.
const WIRES: &[&str] = &["openai-chat", "openai-responses", "anthropic", "gemini"];

/// Each bug and the rows that show it: a resume that stops at the first
/// damaged line loses the intact records after a fused pair; an append
/// that does not start a line of its own fuses onto a torn or NUL tail.
const BUGS: &[(&str, &[&str])] = &[
    (
        "store_resume_stops_at_damage",
        &["store_damage_fuse_records"],
    ),
    (
        "store_append_fused",
        &["store_damage_truncate_last", "store_damage_nul_tail"],
    ),
];

/// Run `only` on `wire` with `extra` arguments under a fresh mark; the
/// report, stdout and whatever was left running.
fn run(only: &str, wire: &str, extra: &[&str]) -> (serde_json::Value, String, Option<i32>) {
    let profile = repo().join("examples/reference/agent-jsonl.yaml");
    let mut args = vec![
        "process_faults.yaml",
        "--only",
        only,
        "--agent",
        profile.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run_report("dmg", wire, &args)
}

/// The check's status on row `id`.
fn status(report: &serde_json::Value, id: &str) -> String {
    check_status(report, id, "store_resumed_past_damage")
}

#[test]
fn the_reference_agent_resumes_past_every_damage_on_every_wire() {
    for wire in WIRES {
        let (report, stdout, code) = run(ROWS, wire, &[]);
        assert_eq!(code, Some(0), "{wire}: {stdout}");
        assert!(stdout.contains("4 passed, 0 failed"), "{wire}: {stdout}");
        for id in ROWS.split(',') {
            assert_eq!(status(&report, id), "pass", "{wire} {id}");
        }
        let skipped = skipped_checks(&report, &[]);
        assert!(skipped.is_empty(), "{wire}: skipped: {skipped:#?}");
    }
}

#[test]
fn each_transcript_bug_fails_store_resumed_past_damage_only_on_every_wire() {
    let mut problems = Vec::new();
    for (bug, rows) in BUGS {
        for wire in WIRES {
            let arg = format!("--agent-arg=--bug={bug}");
            let (report, stdout, code) = run(&rows.join(","), wire, &[&arg]);
            if code != Some(1) {
                problems.push(format!("{bug} {wire}: exit {code:?}: {stdout}"));
            }
            for id in *rows {
                let failed = failed_invariants(&report, id);
                let names = failed_checks(&report, id);
                if failed != ["store_integrity"] || names != ["store_resumed_past_damage"] {
                    problems.push(format!(
                        "{bug} {wire} {id}: failed {names:?}: {:?}",
                        violations(&report, id)
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}

#[test]
fn on_a_sqlite_store_the_rows_are_not_applicable() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("na.json");
    let mark = new_mark("dmg-na");
    let out = chaosrun(
        &mark,
        &[
            "process_faults.yaml",
            "--only",
            ROWS,
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("0 passed, 0 failed, 4 not applicable")
            && stdout.contains("declares no JSONL store"),
        "{stdout}"
    );
    kill_marked(&mark);
}
