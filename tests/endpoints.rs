//! The endpoint table (endpoints.yaml, issue 44.6): every request the agent
//! makes on the provider's host besides its model calls never answered
//! (`endpoints_hang`) or answered 500 (`endpoints_500`). The reference agent
//! asks for the model list at start-up and waits at most 5 s for it: it
//! passes both rows on every wire, the fault seen landing on its request
//! (`endpoint_fault_landed` made, not skipped). With its bug
//! `models_list_no_timeout` (the list waited for without a timeout) the
//! hang row fails on `boots` alone, naming the request left unanswered, and
//! the 500 row (answered at once) still passes. The eight runs go at once.

mod common;

use common::*;

/// Every wire the provider and the reference agent speak.
const WIRES: &[&str] = &["openai-chat", "openai-responses", "anthropic", "gemini"];

/// The request each wire's reference agent makes for its model list.
fn models_request(wire: &str) -> &'static str {
    match wire {
        "anthropic" => "GET /v1/models",
        "gemini" => "GET /v1beta/models",
        _ => "GET /v1/models",
    }
}

/// What is wrong with the run on `wire` (nothing: empty).
fn problems(
    wire: &str,
    bug: bool,
    report: &serde_json::Value,
    stdout: &str,
    code: Option<i32>,
) -> Vec<String> {
    let mut out = Vec::new();
    let landed = |id: &str| check_status(report, id, "endpoint_fault_landed") == "pass";
    if !landed("endpoints_500") {
        out.push(format!(
            "{wire}, bug {bug}: the 500 did not land:\n{stdout}"
        ));
    }
    if !bug {
        if code != Some(0) || !stdout.contains("2 passed, 0 failed") {
            out.push(format!("{wire}: exit {code:?}\n{stdout}"));
        }
        if !landed("endpoints_hang") {
            out.push(format!("{wire}: the hang did not land:\n{stdout}"));
        }
        return out;
    }
    if code != Some(1) || !stdout.contains("1 passed, 1 failed") {
        out.push(format!("{wire}, bug: exit {code:?}\n{stdout}"));
    }
    let failed = failed_checks(report, "endpoints_hang");
    if failed != ["boots"] {
        out.push(format!(
            "{wire}, bug: failed {failed:?}, expected only boots"
        ));
    }
    let v = violations(report, "endpoints_hang").join("\n");
    let named = format!(
        "each never answered by the row's `endpoint_fault`: {}",
        models_request(wire)
    );
    if !v.contains(&named) {
        out.push(format!(
            "{wire}, bug: the request is not named ({named}): {v}"
        ));
    }
    out
}

#[test]
fn other_endpoints_never_hold_the_reference_agent_and_the_bug_fails_its_boot() {
    let runs: Vec<_> = WIRES
        .iter()
        .flat_map(|w| [(*w, false), (*w, true)])
        .map(|(w, bug)| {
            std::thread::spawn(move || {
                let mut args = vec!["endpoints.yaml"];
                if bug {
                    args.push("--agent-arg=--bug=models_list_no_timeout");
                }
                (w, bug, run_report("endpoints", w, &args))
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in runs {
        let (wire, bug, (report, stdout, code)) = h.join().unwrap();
        all.extend(problems(wire, bug, &report, &stdout, code));
    }
    assert!(all.is_empty(), "\n{}", all.join("\n\n"));
}
