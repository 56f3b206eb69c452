//! A bounded real-agent lane: fast seed scenarios against Codex CLI 0.169.0
//! through `examples/codex/codex.yaml` (exec mode), with the verdicts the
//! full-table runs recorded in examples/codex/README.md. Some pass; two fail
//! on real Codex behaviour:
//!
//! * `provider_500_forever`: two retry layers multiply. The HTTP layer
//!   retries a 5xx `request_max_retries` = 4 times, and the turn loop retries
//!   the failed stream `stream_max_retries` = 5 times: 5 × 6 = 30 requests for
//!   one turn, past the scenario's bound of 16.
//! * `tool_background_swarm`: `codex exec` exits after its turn and leaves the
//!   `setsid` escapee of its `exec_command` job running; chaosrun reports the
//!   survivor and then sweeps it itself.
//!
//! Ignored by a plain `cargo test` (it needs Codex installed);
//! `.ci/codex_subset.sh` installs it. Run by hand without Codex, it fails
//! saying what to install.

mod common;

use common::*;
use std::time::Duration;

const PASSING: &[&str] = &[
    "provider_400_forever",
    "provider_429_forever",
    "tool_args_garbage",
    "tool_name_unknown",
];

/// (scenario, the invariants it fails, a phrase of the violation)
const FAILING: &[(&str, &[&str], &str)] = &[
    (
        "provider_500_forever",
        &["provider_calls"],
        "made 30 provider calls",
    ),
    ("tool_background_swarm", &["process_hygiene"], "sleep 3600"),
];

fn passed(report: &serde_json::Value, id: &str) -> bool {
    scenario(report, id)["passed"] == true
}

#[test]
#[ignore = "needs Codex CLI 0.169.0: .ci/codex_subset.sh"]
fn codex_subset_verdicts() {
    let codex = repo().join("examples/codex/prefix/bin/codex");
    require(
        "Codex CLI 0.169.0",
        codex.exists(),
        &format!(
            "{} does not exist; run .ci/codex_subset.sh",
            codex.display()
        ),
    );

    let mark = new_mark("codex-subset");
    let dir = std::env::temp_dir().join(format!("chaosrun-{mark}"));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let json_arg = json.to_string_lossy().to_string();

    let mut args: Vec<&str> = vec!["--agent", "examples/codex/codex.yaml", "scenarios.yaml"];
    for id in PASSING.iter().chain(FAILING.iter().map(|(id, _, _)| id)) {
        args.push("--only");
        args.push(id);
    }
    args.extend([
        "--jobs",
        "2",
        "--seed",
        "11",
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
        "two scenarios fail, so chaosrun exits 1\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let report = read_json(&json);
    assert_eq!(report["passed"], PASSING.len() as u64, "{stdout}");
    assert_eq!(report["failed"], FAILING.len() as u64, "{stdout}");

    for id in PASSING {
        assert!(
            passed(&report, id),
            "{id} should pass on Codex 0.169.0\n{stdout}"
        );
        assert!(failed_invariants(&report, id).is_empty(), "{id}\n{stdout}");
    }
    for (id, invariants, says) in FAILING {
        assert!(
            !passed(&report, id),
            "{id} should fail on Codex 0.169.0\n{stdout}"
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
    // The store checks are made on Codex's rollout transcripts, not skipped.
    for id in PASSING {
        let s = scenario(&report, id);
        let made = s["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"] == "store_tool_results" && c["status"] == "pass")
            .count();
        assert_eq!(made, 1, "{id}: store_tool_results was not made\n{stdout}");
    }

    // tool_background_swarm's failure IS a survivor; chaosrun sweeps it after
    // the check, so nothing may carry the marker once it has exited.
    assert!(
        left.is_empty(),
        "processes left behind after chaosrun exited: {left:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
