//! Issue 43 item 3 over the real ACP drive: the bundled reference agent's
//! `session/load` replays every completed turn after chaos_soak's kills
//! (`reload_keeps_done_turns` passes, made), and `--bug
//! acp_load_drops_last_turn` fails that check only. (On main this case
//! belongs in tests/acp_tables.rs's CASES.)

mod common;

use common::*;
use std::time::Duration;

/// chaos_soak over ACP, with `extra` arguments: the report.
fn soak(name: &str, extra: &[&str]) -> serde_json::Value {
    let mark = new_mark(name);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let mut args = vec![
        "process_faults.yaml",
        "--agent",
        "reference-acp",
        "--only",
        "chaos_soak",
        "--seed",
        "12063398794091355681",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend(extra);
    let _ = chaosrun(&mark, &args);
    let left = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(left.is_empty(), "{name}: left behind: {left:?}");
    read_json(&json)
}

/// The checks of the report's only row with `status`.
fn with_status(report: &serde_json::Value, status: &str) -> Vec<serde_json::Value> {
    report["scenarios"][0]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == status)
        .cloned()
        .collect()
}

#[test]
fn a_reload_that_drops_the_last_turn_fails_reload_keeps_done_turns_only() {
    let bug = "--agent-arg=--bug=acp_load_drops_last_turn";
    let healthy = std::thread::spawn(|| soak("reload-ok", &[]));
    let buggy = soak("reload-bug", &[bug]);
    let healthy = healthy.join().unwrap();
    assert!(with_status(&healthy, "fail").is_empty(), "{healthy}");
    let made = with_status(&healthy, "pass");
    assert!(
        made.iter().any(|c| c["name"] == "reload_keeps_done_turns"),
        "not made: {healthy}"
    );
    let failed = with_status(&buggy, "fail");
    let names: Vec<_> = failed.iter().map(|c| c["name"].clone()).collect();
    assert_eq!(names, ["reload_keeps_done_turns"], "{buggy}");
    let says = failed[0]["violations"][0].as_str().unwrap();
    assert!(says.contains("completed before the kill: turn"), "{says}");
}
