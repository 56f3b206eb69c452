//! A bounded real-agent lane: six fast seed scenarios against Gemini CLI
//! 0.61.0 in exec mode (`examples/gemini-cli/gemini-cli.yaml`), with the
//! verdicts the full-table runs recorded in examples/gemini-cli/README.md.
//! Four pass; two fail on real Gemini CLI behaviour:
//!
//! * `tool_background_swarm`: a one-shot `gemini -p` exits after its turn and
//!   leaves its `is_background: true` job (and its eight children) running.
//! * `provider_400_forever`: a turn that fails rolls the prompt back out of
//!   the session file (`GeminiChat` rewrites `messages`), which then holds
//!   nothing resumable, so `gemini --resume UUID` refuses the probe with "No
//!   previous sessions found for this project." without calling the model.
//!
//! Ignored by a plain `cargo test` (it needs Gemini CLI installed);
//! scripts/test.sh installs it with `.ci/gemini_subset.sh` and runs it. Run by
//! hand without it, it fails saying what to install.

mod common;

use common::*;
use std::time::Duration;

const PASSING: &[&str] = &[
    "tool_args_garbage",
    "tool_name_unknown",
    "parallel_8_terminal_calls",
    "interrupt_endless_tool_loop",
];

/// (scenario, the invariants it fails, a phrase of the violation)
const FAILING: &[(&str, &[&str], &str)] = &[
    ("tool_background_swarm", &["process_hygiene"], "sleep 3600"),
    (
        "provider_400_forever",
        &["reusability"],
        "without calling the provider",
    ),
];

fn passed(report: &serde_json::Value, id: &str) -> bool {
    report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("scenario {id} in the report"))["passed"]
        == true
}

#[test]
#[ignore = "needs Gemini CLI 0.61.0: .ci/gemini_subset.sh (scripts/test.sh runs it)"]
fn gemini_subset_verdicts() {
    let gemini = repo().join("examples/gemini-cli/prefix/bin/gemini");
    require(
        "Gemini CLI 0.61.0",
        gemini.exists(),
        &format!(
            "{} does not exist; run .ci/gemini_subset.sh",
            gemini.display()
        ),
    );

    let mark = new_mark("gemini-subset");
    let dir = std::env::temp_dir().join(format!("chaosrun-{mark}"));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let json_arg = json.to_string_lossy().to_string();

    let mut args: Vec<&str> = vec![
        "--agent",
        "examples/gemini-cli/gemini-cli.yaml",
        "scenarios.yaml",
    ];
    for id in PASSING.iter().chain(FAILING.iter().map(|(id, _, _)| id)) {
        args.push("--only");
        args.push(id);
    }
    // Two at a time, as the full tables were run (a 2-core machine).
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
        "two scenarios fail, so chaosrun exits 1\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let report = read_json(&json);
    assert_eq!(report["passed"], PASSING.len() as u64, "{stdout}");
    assert_eq!(report["failed"], FAILING.len() as u64, "{stdout}");

    for id in PASSING {
        assert!(
            passed(&report, id),
            "{id} should pass on Gemini CLI 0.61.0\n{stdout}"
        );
        assert!(failed_invariants(&report, id).is_empty(), "{id}\n{stdout}");
    }
    for (id, invariants, says) in FAILING {
        assert!(
            !passed(&report, id),
            "{id} should fail on Gemini CLI 0.61.0\n{stdout}"
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
