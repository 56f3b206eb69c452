//! The whole seed table against the bundled reference agent, on every wire it
//! speaks (`--wire`, one wire at a time): every scenario passes, every check that the reference profile supports is actually made
//! (none reported "not checked" except where a scenario has nothing to check),
//! and no process outlives the run.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn reference_agent_passes_the_seed_table_on_every_wire() {
    for wire in ["openai-chat", "openai-responses", "anthropic", "gemini"] {
        table_passes_on(wire);
    }
}

fn table_passes_on(wire: &str) {
    let mark = new_mark("table");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let out = chaosrun(
        &mark,
        &[
            "scenarios.yaml",
            "--wire",
            wire,
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(0),
        "{wire}: exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    let report = read_json(&json);
    assert_eq!(report["schema"], "chaosrun-report/2");
    assert_eq!(report["complete"], true);
    // Rows the profile declares N/A (MCP rows while it says `mcp: false`)
    // are shown apart; every other row passes.
    let scenarios: Vec<&serde_json::Value> = report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["verdict"] != "not_applicable")
        .collect();
    assert!(scenarios.len() >= 23, "{wire}: {stdout}");
    let n = scenarios.len();
    assert!(
        stdout.contains(&format!("{n} passed, 0 failed")),
        "{wire}: {stdout}"
    );
    assert_eq!(stdout.matches("\nPASS  ").count(), n, "{stdout}");
    // Every scenario carries evidence that its fault landed.
    for s in &scenarios {
        assert!(
            s["checks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["invariant"] == "exercised" && c["status"] == "pass"),
            "no exercised evidence: {s}"
        );
    }
    // The reference profile has a store, a breaker and a tool map: every check
    // that a scenario has is made.
    let skipped = skipped_checks(&report, &[]);
    assert!(skipped.is_empty(), "{wire}: skipped: {skipped:#?}");
    let survivors = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(survivors.is_empty(), "{wire}: left behind: {survivors:?}");
}
