//! The ACP client side as a fault surface (acp.yaml's client rows,
//! docs/acp.md "Faults on the client side"): the reference agent passes the
//! rows over ACP on every wire; `--bug acp_permission_unsettled` fails only
//! `pending_request_settled`; `--bug acp_terminal_no_timeout` only the
//! terminal rows' `faulted_turn_ends`; `--bug acp_terminal_never_released`
//! only their `terminals_released` (and the late-created terminal's row's);
//! under the driver protocol the rows are N/A, "needs the ACP drive".

mod common;

use common::*;
use std::time::Duration;

const WIRES: &[&str] = &["openai-chat", "openai-responses", "anthropic", "gemini"];

/// Run the built-in acp.yaml with `agent` (and `extra`): exit code, report.
fn run(agent: &str, wire: &str, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let mark = new_mark(&format!("acpclient-{wire}"));
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let json_arg = json.to_string_lossy().to_string();
    let mut args = vec![
        "--agent",
        agent,
        "acp.yaml",
        "--wire",
        wire,
        "--no-progress",
    ];
    args.extend(["--json", &json_arg]);
    args.extend(extra);
    let out = chaosrun(&mark, &args);
    if !wait_unmarked(&mark, Duration::from_secs(10)).is_empty() {
        kill_marked(&mark);
    }
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), read_json(&json), text)
}

#[test]
fn the_reference_agent_passes_the_client_rows_over_acp_on_every_wire() {
    for wire in WIRES {
        let (code, report, text) = run("reference-acp", wire, &[]);
        assert_eq!(code, Some(0), "{wire}:\n{text}");
        assert_eq!(
            report["passed"], 16,
            "{wire}: every row of acp.yaml\n{text}"
        );
        let s = scenario(&report, "acp_permission_never_until_cancel");
        let made = s["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "pending_request_settled" && c["status"] == "pass");
        assert!(made, "{wire}: the settle check was made and passed:\n{s}");
        for id in TERMINAL_ROWS {
            let s = scenario(&report, id);
            let released = s["checks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["name"] == "terminals_released" && c["status"] == "pass");
            assert!(
                released,
                "{wire}: {id} used a client terminal and released it:\n{s}"
            );
        }
    }
}

/// The rows whose command runs in the client's terminal.
const TERMINAL_ROWS: [&str; 3] = [
    "acp_terminal_wait_never_returns",
    "acp_terminal_waits_for_input",
    "acp_terminal_output_endless",
];

#[test]
fn a_terminal_waited_on_with_no_timeout_fails_the_terminal_rows_termination_only() {
    let extra = [
        "--agent-arg=--bug=acp_terminal_no_timeout",
        "--deadline-scale",
        "0.25",
    ];
    let (code, report, text) = run("reference-acp", "openai-responses", &extra);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(report["failed"], 3, "{text}");
    for id in TERMINAL_ROWS {
        assert_eq!(
            failed_checks(&report, id),
            ["faulted_turn_ends"],
            "{id}:\n{text}"
        );
        assert!(
            violations(&report, id)[0].contains("did not return"),
            "{text}"
        );
    }
}

#[test]
fn a_terminal_never_released_fails_terminals_released_only() {
    let extra = ["--agent-arg=--bug=acp_terminal_never_released"];
    let (code, report, text) = run("reference-acp", "gemini", &extra);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(report["failed"], 4, "{text}");
    // The late-created terminal's row too: the agent kills it, never releases it.
    for id in TERMINAL_ROWS.iter().chain(&["acp_terminal_create_late"]) {
        assert_eq!(
            failed_checks(&report, id),
            ["terminals_released"],
            "{id}:\n{text}"
        );
        assert!(violations(&report, id)[0].contains("released 0"), "{text}");
    }
}

#[test]
fn a_permission_left_unsettled_fails_pending_request_settled_only() {
    let extra = [
        "--agent-arg",
        "--bug",
        "--agent-arg",
        "acp_permission_unsettled",
    ];
    let (code, report, text) = run("reference-acp", "anthropic", &extra);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(
        scenario(&report, "acp_permission_late")["passed"],
        true,
        "{text}"
    );
    let id = "acp_permission_never_until_cancel";
    let failed: Vec<String> = scenario(&report, id)["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(failed, ["pending_request_settled"], "{text}");
    assert!(
        violations(&report, id)[0].contains("kept waiting"),
        "{text}"
    );
}

#[test]
fn the_client_rows_are_not_applicable_without_the_acp_drive() {
    let (code, report, text) = run("reference", "openai-chat", &[]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(report["not_applicable"], 10, "{text}");
    assert!(text.contains("needs the ACP drive"), "{text}");
}
