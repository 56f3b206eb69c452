//! The value-fault table (value_faults.yaml, issue 46): 200s that are wrong
//! without being errors. The reference agent passes every row on every
//! wire, each row's fault landed and `request_loop` made (not `not
//! checked`) on the rows with a value fault (the schema row's tool calls
//! are none: it has no such check); each value-fault bug fails the rows that show it on its one
//! check alone, on every wire: `retry_empty_answer` (the same request sent
//! again and again) on `request_loop`, under the row's call bound;
//! `continue_after_length` (continuations with no bound, each request a new
//! one) on `call_bound`, never on `request_loop`.

mod common;

use common::*;
use std::time::Duration;

const ROWS: &[&str] = &[
    "value_empty_answer",
    "value_cut_for_length",
    "value_refusal",
    "value_tool_calls_finish_without_calls",
    "value_schema_breaking_arguments",
];

/// Every wire the provider and the reference agent speak.
const WIRES: &[&str] = &["openai-chat", "openai-responses", "anthropic", "gemini"];

/// Each bug, the rows that show it and the one check that must fail there.
const BUGS: &[(&str, &[&str], &str)] = &[
    (
        "retry_empty_answer",
        &[
            "value_empty_answer",
            "value_tool_calls_finish_without_calls",
        ],
        "request_loop",
    ),
    (
        "continue_after_length",
        &["value_cut_for_length"],
        "call_bound",
    ),
];

/// The table's `rows` on `wire` with `extra` arguments under a fresh mark:
/// the report, stdout and the exit code; nothing left running.
fn run(rows: &[&str], wire: &str, extra: &[&str]) -> (serde_json::Value, String, Option<i32>) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mark = new_mark("value");
    let only = rows.join(",");
    let mut args = vec![
        "value_faults.yaml",
        "--only",
        &only,
        "--wire",
        wire,
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = chaosrun(&mark, &args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let left = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(left.is_empty(), "{wire}: left behind: {left:?}");
    (read_json(&json), stdout, out.status.code())
}

/// The status of check `name` on row `id`.
fn status<'a>(report: &'a serde_json::Value, id: &str, name: &str) -> &'a str {
    scenario(report, id)["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["status"].as_str())
        .unwrap_or("missing")
}

#[test]
fn the_reference_agent_passes_the_value_table_on_every_wire() {
    let runs: Vec<_> = WIRES
        .iter()
        .map(|w| std::thread::spawn(move || (*w, run(ROWS, w, &[]))))
        .collect();
    for h in runs {
        let (wire, (report, stdout, code)) = h.join().unwrap();
        assert_eq!(code, Some(0), "{wire}: {stdout}");
        assert!(stdout.contains("5 passed, 0 failed"), "{wire}: {stdout}");
        for id in ROWS {
            let judged = *id != "value_schema_breaking_arguments";
            let want = if judged { "pass" } else { "missing" };
            assert_eq!(status(&report, id, "request_loop"), want, "{wire} {id}");
            assert_eq!(status(&report, id, "fault_served"), "pass", "{wire} {id}");
        }
        let skipped = skipped_checks(&report, &[]);
        assert!(skipped.is_empty(), "{wire}: skipped: {skipped:#?}");
    }
}

#[test]
fn each_value_bug_fails_its_one_check_on_every_wire() {
    let mut problems = Vec::new();
    for (bug, rows, check) in BUGS {
        let arg = format!("--agent-arg=--bug={bug}");
        let runs: Vec<_> = WIRES
            .iter()
            .map(|w| {
                let arg = arg.clone();
                std::thread::spawn(move || (*w, run(rows, w, &[&arg])))
            })
            .collect();
        for h in runs {
            let (wire, (report, stdout, code)) = h.join().unwrap();
            if code != Some(1) {
                problems.push(format!("{bug} {wire}: exit {code:?}: {stdout}"));
            }
            for id in *rows {
                let failed = failed_checks(&report, id);
                if failed != [*check] {
                    problems.push(format!(
                        "{bug} {wire} {id}: failed {failed:?}, expected only {check}: {:?}",
                        violations(&report, id)
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}
