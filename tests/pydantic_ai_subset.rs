//! A bounded real-agent lane: five fast seed scenarios against a one-shot CLI
//! agent built on pydantic-ai 2.62.0 (`examples/pydantic-ai/agent.py`, in
//! exec mode through `examples/pydantic-ai/pydantic-ai.yaml`), with the
//! verdicts the full-table runs recorded in examples/pydantic-ai/README.md.
//! Four pass; one fails on what a one-shot agent cannot do:
//!
//! * `parallel_8_terminal_calls` passes with its store checks MADE on the
//!   agent's real JSONL transcript (pydantic-ai's own serialized messages),
//!   not "not checked".
//! * `tool_background_swarm`: the agent's process ends with its turn and
//!   nothing in pydantic-ai owns the `background: true` job it started, so
//!   the swarm outlives it. chaosrun reports the survivors, then sweeps them.
//!
//! Ignored by a plain `cargo test` (it needs pydantic-ai installed);
//! scripts/test.sh installs it with `.ci/pydantic_ai_subset.sh` and runs it.
//! Run by hand without it, it fails saying what to install.

mod common;

use common::*;
use std::time::Duration;

const PASSING: &[&str] = &[
    "provider_400_forever",
    "tool_args_truncated_json",
    "interrupt_hung_tool",
    "parallel_8_terminal_calls",
];

/// (scenario, the invariants it fails, a phrase of the violation)
const FAILING: &[(&str, &[&str], &str)] =
    &[("tool_background_swarm", &["process_hygiene"], "sleep 3600")];

/// The store checks that must have been made (pass), not skipped.
const STORE_CHECKS: &[&str] = &["store_tool_results", "store_no_duplicate_user_turn"];

fn check_status(report: &serde_json::Value, id: &str, name: &str) -> String {
    scenario(report, id)["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .map(|c| c["status"].as_str().unwrap_or("").to_string())
        .unwrap_or_else(|| "absent".into())
}

#[test]
#[ignore = "needs pydantic-ai 2.62.0: .ci/pydantic_ai_subset.sh (scripts/test.sh runs it)"]
fn pydantic_ai_subset_verdicts() {
    let python = repo().join("examples/pydantic-ai/.venv/bin/python");
    require(
        "pydantic-ai 2.62.0",
        python.exists(),
        &format!(
            "{} does not exist; run .ci/pydantic_ai_subset.sh",
            python.display()
        ),
    );

    let mark = new_mark("pydantic-ai-subset");
    let dir = std::env::temp_dir().join(format!("chaosrun-{mark}"));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let json_arg = json.to_string_lossy().to_string();

    let mut args: Vec<&str> = vec![
        "--agent",
        "examples/pydantic-ai/pydantic-ai.yaml",
        "scenarios.yaml",
    ];
    for id in PASSING.iter().chain(FAILING.iter().map(|(id, _, _)| id)) {
        args.push("--only");
        args.push(id);
    }
    // Two at a time: each turn is a fresh Python process importing
    // pydantic-ai (about a second of CPU), so more at once on 2 cores only
    // stretches every turn.
    args.extend([
        "--jobs",
        "2",
        "--seed",
        "7",
        "--no-progress",
        "--json",
        &json_arg,
    ]);

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
            "{id} should pass on pydantic-ai 2.62.0\n{stdout}"
        );
        assert!(failed_invariants(&report, id).is_empty(), "{id}\n{stdout}");
    }
    for name in STORE_CHECKS {
        assert_eq!(
            check_status(&report, "parallel_8_terminal_calls", name),
            "pass",
            "{name} must be made on the JSONL transcript\n{stdout}"
        );
    }
    for (id, invariants, says) in FAILING {
        assert_eq!(
            scenario(&report, id)["passed"],
            false,
            "{id} should fail on pydantic-ai 2.62.0\n{stdout}"
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

    // tool_background_swarm's failure IS survivors; chaosrun sweeps them after
    // the check, so nothing may carry the marker once it has exited.
    assert!(
        left.is_empty(),
        "processes left behind after chaosrun exited: {left:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
