//! Both built-in tables over the ACP drive (issue 43): the bundled reference
//! agent, run as `--agent reference-acp` (its `agent.py --acp` behind
//! `agent-acp.yaml`), passes the seed table and the process-fault table on
//! every wire, every check its profile supports made; each ACP bug option
//! fails its own check only. Survivors are found by the test's argv/env
//! marker, not by chaosrun's own bookkeeping.

mod common;

use common::*;
use std::time::Duration;

const WIRES: &[&str] = &["openai-chat", "openai-responses", "anthropic", "gemini"];

/// One table over ACP on `wire`: (exit code, stdout, report).
fn run_table(table: &str, wire: &str, extra: &[&str]) -> (Option<i32>, String, serde_json::Value) {
    let mark = new_mark(&format!("acp-{wire}"));
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let mut args = vec![
        table,
        "--agent",
        "reference-acp",
        "--wire",
        wire,
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend(extra);
    let out = chaosrun(&mark, &args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let left = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(left.is_empty(), "{table} {wire}: left behind: {left:?}");
    (out.status.code(), stdout, read_json(&json))
}

/// Every scenario ran over ACP (the observation's turn model says so
/// through the ACP-only checks) and carries evidence its fault landed.
fn assert_acp_and_exercised(table: &str, wire: &str, report: &serde_json::Value) {
    for s in report["scenarios"].as_array().unwrap() {
        let checks = s["checks"].as_array().unwrap();
        let has = |name: &str| checks.iter().any(|c| c["name"] == name);
        assert!(
            has("tool_calls_settled") && has("quiet_after_cancel"),
            "{table} {wire}: not run over ACP: {s}"
        );
        assert!(
            checks
                .iter()
                .any(|c| c["invariant"] == "exercised" && c["status"] == "pass"),
            "{table} {wire}: no exercised evidence: {s}"
        );
    }
}

/// The ACP-only checks are `not checked` where a row has nothing for them
/// (no tool call reported or issued, no turn cancelled, no turn completed
/// before a kill): every other check is made.
const ACP_NOT_CHECKED: &[&str] = &[
    "tool_calls_settled",
    "quiet_after_cancel",
    "tool_calls_reported",
    "reload_keeps_done_turns",
];

/// The checks a report did not make, but [`ACP_NOT_CHECKED`].
fn skipped(report: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for s in report["scenarios"].as_array().unwrap() {
        for c in s["checks"].as_array().unwrap() {
            let acp = ACP_NOT_CHECKED.iter().any(|n| c["name"] == *n);
            if c["status"] == "not_checked" && !acp {
                out.push(format!("{}: {c}", s["id"]));
            }
        }
    }
    out
}

#[test]
fn reference_agent_passes_the_seed_table_over_acp_on_every_wire() {
    let runs: Vec<_> = WIRES
        .iter()
        .map(|w| std::thread::spawn(move || (w, run_table("scenarios.yaml", w, &[]))))
        .collect();
    for h in runs {
        let (wire, (code, stdout, report)) = h.join().unwrap();
        assert_eq!(code, Some(0), "{wire}: {stdout}");
        assert!(stdout.contains("60 passed, 0 failed"), "{wire}: {stdout}");
        assert_acp_and_exercised("scenarios.yaml", wire, &report);
        let skipped = skipped(&report);
        assert!(skipped.is_empty(), "{wire}: skipped: {skipped:#?}");
    }
}

#[test]
fn reference_agent_passes_the_process_fault_table_over_acp_on_every_wire() {
    let runs: Vec<_> = WIRES
        .iter()
        .map(|w| {
            std::thread::spawn(move || {
                // The OOM row needs a memory cgroup controller: process_faults.rs runs it.
                // The long session (60 turns) runs over ACP in process_faults.rs.
                // The store_damage_* rows need a JSONL store (store_damage.rs).
                let extra = [
                    "--skip",
                    "oom_kill_mid_turn",
                    "--skip",
                    "store_damage_truncate_last,store_damage_nul_tail,store_damage_fuse_records,store_damage_concurrent_append",
                    "--skip",
                    "long_session_tool_output",
                    "--seed",
                    "7",
                ];
                (w, run_table("process_faults.yaml", w, &extra))
            })
        })
        .collect();
    for h in runs {
        let (wire, (code, stdout, report)) = h.join().unwrap();
        assert_eq!(code, Some(0), "{wire}: {stdout}");
        assert!(stdout.contains("11 passed, 0 failed"), "{wire}: {stdout}");
        assert_acp_and_exercised("process_faults.yaml", wire, &report);
        let skipped = skipped(&report);
        assert!(skipped.is_empty(), "{wire}: skipped: {skipped:#?}");
    }
}

/// An ACP bug option, the row that shows it, and the one check it fails.
struct Case {
    bug: &'static str,
    scenario: &'static str,
    check: &'static str,
    says: &'static str,
}

const CASES: &[Case] = &[
    Case {
        bug: "acp_tool_left_in_progress",
        scenario: "tool_huge_output",
        check: "tool_calls_settled",
        says: "was still `in_progress`",
    },
    Case {
        bug: "acp_update_after_cancel",
        scenario: "interrupt_subagent",
        check: "quiet_after_cancel",
        says: "agent_message_chunk",
    },
    Case {
        bug: "acp_cancel_leaves_job",
        scenario: "interrupt_hung_tool",
        check: "tool_gone_before_next_turn",
        says: "",
    },
    Case {
        bug: "acp_subagent_ignores_cancel",
        scenario: "interrupt_subagent",
        check: "subagent_outlived_turn",
        says: "",
    },
    // Not an ACP bug: the driver-protocol one, caught over ACP too.
    Case {
        bug: "zombie_children",
        scenario: "tool_fg_child_holds_stdout",
        check: "no_zombie_children",
        says: "was left unreaped",
    },
];

#[test]
fn each_acp_bug_fails_its_own_check_only() {
    let runs: Vec<_> = CASES
        .iter()
        .enumerate()
        .map(|(i, c)| {
            std::thread::spawn(move || {
                let bug = format!("--agent-arg=--bug={}", c.bug);
                let extra = ["--only", c.scenario, bug.as_str()];
                (
                    c,
                    run_table("scenarios.yaml", WIRES[i % WIRES.len()], &extra),
                )
            })
        })
        .collect();
    let mut problems = Vec::new();
    for h in runs {
        let (c, (code, stdout, report)) = h.join().unwrap();
        if code != Some(1) {
            problems.push(format!("{}: exit {code:?}\n{stdout}", c.bug));
            continue;
        }
        let s = &report["scenarios"][0];
        let failed: Vec<&serde_json::Value> = s["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| k["status"] == "fail")
            .collect();
        let names: Vec<&str> = failed.iter().filter_map(|k| k["name"].as_str()).collect();
        if names != [c.check] {
            problems.push(format!("{}: failed {names:?}, want [{}]", c.bug, c.check));
        } else if !failed[0]["violations"].to_string().contains(c.says) {
            problems.push(format!("{}: {} says {}", c.bug, c.check, failed[0]));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}
