//! A bounded real-agent lane: six fast seed scenarios against Claude Code
//! 2.1.328 in exec mode (`examples/claude-code/claude-code.yaml`), with the
//! verdicts the full-table runs recorded in examples/claude-code/README.md.
//! Five pass (each also makes the JSONL store checks on Claude Code's own
//! transcript; `tool_loop_hits_turn_budget` proves the profile's
//! `--max-turns` and its `errors.0` final); one fails on a real Claude Code
//! behaviour:
//!
//! * `provider_400_forever`: a permanent 400 is sent again with experimental
//!   `anthropic-beta` headers dropped one by one and with tool search off
//!   (6 calls where the bound is 2; see the README's diagnosis).
//!
//! Ignored by a plain `cargo test` (it needs Claude Code installed);
//! `.ci/claude_code_subset.sh` installs it. Run by hand without it, it fails
//! saying what to install.

mod common;

use common::*;
use std::time::Duration;

const PASSING: &[&str] = &[
    "tool_args_garbage",
    "provider_500_forever",
    "tool_name_unknown",
    "parallel_8_terminal_calls",
    "tool_loop_hits_turn_budget",
];

/// (scenario, the invariants it fails, a phrase of the violation)
const FAILING: &[(&str, &[&str], &str)] = &[(
    "provider_400_forever",
    &["provider_calls"],
    "provider calls; the bound is 2",
)];

fn scenario<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("scenario {id} in the report"))
}

/// The names of the store checks that were made (not `not_checked`).
fn store_checks_made(report: &serde_json::Value, id: &str) -> Vec<String> {
    scenario(report, id)["checks"]
        .as_array()
        .map(|checks| {
            checks
                .iter()
                .filter(|c| c["name"].as_str().is_some_and(|n| n.starts_with("store_")))
                .filter(|c| c["status"] == "pass")
                .filter_map(|c| c["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
#[ignore = "needs Claude Code 2.1.328: .ci/claude_code_subset.sh"]
fn claude_code_subset_verdicts() {
    let claude = repo().join("examples/claude-code/prefix/bin/claude");
    require(
        "Claude Code 2.1.328",
        claude.exists(),
        &format!(
            "{} does not exist; run .ci/claude_code_subset.sh",
            claude.display()
        ),
    );

    let mark = new_mark("claude-code-subset");
    let dir = std::env::temp_dir().join(format!("chaosrun-{mark}"));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let json_arg = json.to_string_lossy().to_string();

    let mut args: Vec<&str> = vec![
        "--agent",
        "examples/claude-code/claude-code.yaml",
        "scenarios.yaml",
    ];
    for id in PASSING.iter().chain(FAILING.iter().map(|(id, _, _)| id)) {
        args.push("--only");
        args.push(id);
    }
    args.extend(["--jobs", "2", "--no-progress", "--json", &json_arg]);

    let started = std::time::Instant::now();
    let out = chaosrun(&mark, &args);
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    if !left.is_empty() {
        kill_marked(&mark);
    }
    println!("chaosrun took {:.1} s\n{stdout}", took.as_secs_f64());

    assert_eq!(
        out.status.code(),
        Some(1),
        "one scenario fails, so chaosrun exits 1\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let report = read_json(&json);
    assert_eq!(report["passed"], PASSING.len() as u64, "{stdout}");
    assert_eq!(report["failed"], FAILING.len() as u64, "{stdout}");

    for id in PASSING {
        assert_eq!(
            scenario(&report, id)["passed"],
            true,
            "{id} should pass on Claude Code 2.1.328\n{stdout}"
        );
        assert!(failed_invariants(&report, id).is_empty(), "{id}\n{stdout}");
        // The JSONL mapping reads Claude Code's real transcript: the store
        // checks are made, not "not checked".
        let made = store_checks_made(&report, id);
        for check in ["store_tool_results", "store_no_duplicate_user_turn"] {
            assert!(
                made.iter().any(|m| m == check),
                "{id}: {check} not made on the transcript: {made:?}\n{stdout}"
            );
        }
    }
    for (id, invariants, says) in FAILING {
        assert_eq!(
            scenario(&report, id)["passed"],
            false,
            "{id} should fail on Claude Code 2.1.328\n{stdout}"
        );
        assert_eq!(
            failed_invariants(&report, id),
            invariants.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "{id}: failed invariants\n{stdout}"
        );
        let v = violations(&report, id);
        assert!(
            v.iter().any(|v| v.contains(says)),
            "{id}: no violation says {says:?}: {v:?}"
        );
    }
    assert!(
        left.is_empty(),
        "processes left behind after chaosrun exited: {left:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
