//! The built-in ACP table (`acp.yaml`, docs/acp.md "The ACP table") against
//! the reference agent over ACP (`--agent reference-acp`): the healthy agent
//! passes every row on every wire, and each ACP bug option the table was
//! written for fails its own row on its own invariant only (one wire each,
//! taken in turn; `CHAOSRUN_FULL=1`: every wire).

mod common;

use common::*;
use std::time::Duration;

const WIRES: &[&str] = &["openai-chat", "openai-responses", "anthropic", "gemini"];

/// Run `acp.yaml` (or the rows `only`) over ACP on `wire` with `extra`
/// arguments: the exit code, the JSON report and the console output.
fn run(
    name: &str,
    wire: &str,
    only: Option<&str>,
    extra: &[&str],
) -> (Option<i32>, serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let mark = new_mark(name);
    let mut args = vec![
        "--agent",
        "reference-acp",
        "acp.yaml",
        "--wire",
        wire,
        "--json",
        json.to_str().unwrap(),
    ];
    if let Some(id) = only {
        args.extend(["--only", id]);
    }
    args.extend_from_slice(extra);
    let out = chaosrun(&mark, &args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let left = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(left.is_empty(), "{name}: chaosrun left {left:?}");
    let report = if json.exists() {
        read_json(&json)
    } else {
        serde_json::Value::Null
    };
    (out.status.code(), report, text)
}

#[test]
fn the_reference_agent_passes_the_acp_table_on_every_wire() {
    for wire in WIRES {
        let (code, report, out) = run("acp-table", wire, None, &[]);
        assert_eq!(code, Some(0), "{wire}:\n{out}");
        let rows = report["scenarios"].as_array().expect("scenarios").len();
        assert_eq!(rows, 16, "{wire}: every row ran\n{out}");
        assert_eq!(report["passed"], 16, "{wire}:\n{out}");
        let s = report["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == "acp_queued_prompt_survives_kill")
            .expect("the kill row ran");
        let made = s["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "queued_prompt_answered" && c["status"] == "pass");
        assert!(
            made,
            "{wire}: the queue check was made after the kill:\n{s}"
        );
    }
}

/// (bug, row, the only failing invariant, a phrase of its violation)
const CASES: &[(&str, &str, &str, &str)] = &[
    (
        "acp_cancel_before_call_breaks",
        "acp_cancel_before_first_call",
        "reusability",
        "Queued for the next turn",
    ),
    (
        "acp_answer_off_by_one",
        "acp_answer_after_cancel",
        "reusability",
        "the probe was not answered",
    ),
    (
        "acp_tool_unreported",
        "acp_failed_tool_reported",
        "process_hygiene",
        "reported 0 to the client",
    ),
    (
        "acp_no_exit_on_eof",
        "acp_exit_on_stdin_close",
        "process_hygiene",
        "did not exit by itself",
    ),
    (
        "acp_queued_prompt_dropped",
        "acp_prompt_while_turn_runs",
        "reusability",
        "the queued message was lost",
    ),
    (
        "acp_queue_lost_on_kill",
        "acp_queued_prompt_survives_kill",
        "reusability",
        "had persisted the prompt queued while turn 0 ran",
    ),
    (
        "acp_write_new_file_fails",
        "acp_fs_write_new_file",
        "side_effects",
        "no such file in the work dir",
    ),
];

#[test]
fn each_acp_table_bug_fails_its_row_on_its_invariant_only() {
    let mut problems = Vec::new();
    for (i, (bug, row, invariant, says)) in CASES.iter().enumerate() {
        let wires: Vec<&str> = if full_matrix() {
            WIRES.to_vec()
        } else {
            vec![WIRES[i % WIRES.len()]]
        };
        for wire in wires {
            let arg = format!("--agent-arg=--bug={bug}");
            let extra = [arg.as_str(), "--deadline-scale", "0.25"];
            let (code, report, out) = run(bug, wire, Some(row), &extra);
            if code != Some(1) {
                problems.push(format!("[{wire}] {bug}: exit {code:?}, expected 1\n{out}"));
                continue;
            }
            let failed = failed_invariants(&report, row);
            let said = violations(&report, row).join("\n");
            if failed != [*invariant] {
                problems.push(format!(
                    "[{wire}] {bug}: failed {failed:?}, expected only [{invariant}]\n{said}"
                ));
            } else if !said.contains(says) {
                problems.push(format!("[{wire}] {bug}: does not say {says:?}:\n{said}"));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}
