//! Worker mode: three Postgres-backed workers (examples/pgworker) share one
//! store and one conversation. The process-fault table passes against them,
//! including the seeded chaos run, whose schedule kills and stops every one of
//! the workers; the only check left undone is SQLite's integrity check.
//!
//! Needs `CHAOS_PG_DSN` (scripts/postgres.sh starts a server on loopback and
//! prints it) and `examples/pgworker/setup.sh`; scripts/test.sh does both and
//! runs this ignored test. Without them it fails saying what to run.

mod common;

use common::*;
use std::time::Duration;

#[test]
#[ignore = "needs PostgreSQL on loopback: scripts/postgres.sh and examples/pgworker/setup.sh (scripts/test.sh runs them)"]
fn postgres_workers_survive_process_faults_and_seeded_chaos() {
    require(
        "PostgreSQL",
        std::env::var("CHAOS_PG_DSN").is_ok(),
        "CHAOS_PG_DSN is not set: run scripts/postgres.sh and export what it prints",
    );
    require(
        "the pgworker venv",
        repo().join("examples/pgworker/.venv/bin/python").exists(),
        "examples/pgworker/.venv is missing: run examples/pgworker/setup.sh",
    );
    let mark = new_mark("workers");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("w.json");
    let out = chaosrun(
        &mark,
        &[
            "--agent",
            "examples/pgworker/pgworker",
            "process_faults.yaml",
            "--seed",
            "7",
            // The OOM row is run on the single reference agent only
            // (tests/process_faults.rs); worker mode with it is untested.
            "--skip",
            "oom_kill_mid_turn",
            // Likewise the terminal's hangup (one worker hung up at a time
            // is untested with Postgres workers).
            "--skip",
            "hangup_mid_turn",
            "--skip",
            "hangup_after_answer",
            // A long session's memory per turn is one process's: not
            // checked with workers (oracle::memory_per_turn).
            "--skip",
            "long_session_tool_output",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("8 passed, 0 failed"), "{stdout}");
    let report = read_json(&json);
    // Only SQLite's integrity check has no Postgres counterpart.
    let skipped = skipped_checks(&report, &["store_integrity"]);
    assert!(skipped.is_empty(), "skipped: {skipped:#?}");
    let chaos = &scenario(&report, "chaos_soak")["chaos"];
    let landed = chaos["kills"].as_u64().unwrap() + chaos["stops"].as_u64().unwrap();
    assert!(landed >= 20, "only {landed} faults landed: {chaos}");
    let mut hit: Vec<u64> = chaos["schedule"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["worker"].as_u64().unwrap())
        .collect();
    hit.sort();
    hit.dedup();
    assert_eq!(hit, [0, 1, 2], "the schedule picks among all three workers");
    let left = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(left.is_empty(), "left behind: {left:?}");
}
