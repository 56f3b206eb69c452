//! A store that is missing after the run is its own check, `store_written`,
//! never an `integrity_check` failure as well: the one-shot fixture CLI
//! (tests/fixtures/agents/oneshot_no_store.yaml declares a SQLite store it
//! never writes) ends its turns and persists nothing, so `store_written`
//! fails naming the path and the turns, and `integrity_check` is not
//! checked.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn an_agent_that_ends_its_turns_and_writes_no_store_fails_store_written_only() {
    require(
        "python3",
        std::process::Command::new("python3")
            .arg("--version")
            .output()
            .is_ok(),
        "install python3",
    );
    let mark = new_mark("nostore");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let args = [
        "scenarios.yaml",
        "--agent",
        "tests/fixtures/agents/oneshot_no_store.yaml",
        "--only",
        "provider_500_forever",
        "--no-progress",
        "--json",
        json.to_str().unwrap(),
    ];
    let out = command(&mark, &args).output().expect("chaosrun runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        wait_unmarked(&mark, Duration::from_secs(10)),
        Vec::<String>::new()
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let report = read_json(&json);
    let row = scenario(&report, "provider_500_forever");
    let checks = row["checks"].as_array().unwrap();
    let by = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name} check: {row}"))
    };
    let written = by("store_written");
    assert_eq!(written["status"], "fail", "{written}");
    let says = written["violations"].to_string();
    assert!(
        says.contains("oneshot.db") && says.contains("ended turn(s)"),
        "{says}"
    );
    assert_eq!(by("integrity_check")["status"], "not_checked", "{row}");
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        failed,
        ["store_written"],
        "only the missing store fails: {stdout}"
    );
}
