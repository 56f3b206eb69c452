//! The value-fault table (value_faults.yaml, issue 46): 200s that are wrong
//! without being errors. The reference agent passes every row on every
//! wire, each row's fault landed, and `request_loop`, `one_result_per_id`
//! and `results_for_issued_ids` are made (not `not checked`) on the rows
//! with a value fault (the schema row's tool calls are none: it has no such
//! check), `broken_args_never_ran` on the rows whose broken arguments would
//! journal; each value-fault bug fails the rows that show it on its one
//! check alone, on every wire: `retry_empty_answer` (the same request sent
//! again and again, 0.2 s apart) on `request_loop`, under the row's call
//! bound; `hot_reask_empty` (an empty answer asked again at once) on
//! `backoff`;
//! `continue_after_length` (continuations with no bound, each request a new
//! one) on `call_bound`, never on `request_loop`; `answer_replayed_call` (a
//! replayed call answered again) on `one_result_per_id`;
//! `invent_call_on_empty_answer` (a made-up call) on
//! `results_for_issued_ids`; `run_misnamed_args` (the command under a wrong
//! key run) on `broken_args_never_ran`; `paste_partial` (a cut answer pasted
//! into its continuation) on `partial_sent_once`.

mod common;

use common::*;

const ROWS: &[&str] = &[
    "value_empty_answer",
    "value_cut_for_length",
    "value_refusal",
    "value_tool_calls_finish_without_calls",
    "value_schema_breaking_arguments",
    "value_empty_or_cut_at_random",
    "value_tool_args_cut_for_length",
    "value_duplicate_tool_call_id",
    "value_tool_args_empty_every_call",
    "value_tool_args_wrong_key_every_call",
    "value_tool_args_garbled_every_call",
    "value_tool_calls_dropped_every_call",
    "value_duplicated_stream_frames",
    "value_error_body_in_200",
];

/// Rows whose tool-call replies are no value fault (arguments the tool
/// cannot run are the agent's to answer; the call bound judges the loop).
const NOT_VALUE: &[&str] = &[
    "value_schema_breaking_arguments",
    "value_tool_args_empty_every_call",
    "value_tool_args_wrong_key_every_call",
    "value_tool_args_garbled_every_call",
];

/// Rows whose broken tool arguments would journal a side effect.
const BROKEN_ARGS: &[&str] = &[
    "value_schema_breaking_arguments",
    "value_tool_args_cut_for_length",
    "value_tool_args_wrong_key_every_call",
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
    (
        "answer_replayed_call",
        &["value_duplicate_tool_call_id"],
        "one_result_per_id",
    ),
    (
        "invent_call_on_empty_answer",
        &[
            "value_empty_answer",
            "value_tool_calls_finish_without_calls",
        ],
        "results_for_issued_ids",
    ),
    (
        "hot_reask_empty",
        &[
            "value_empty_answer",
            "value_tool_calls_finish_without_calls",
        ],
        "backoff",
    ),
    (
        "paste_partial",
        &["value_cut_for_length"],
        "partial_sent_once",
    ),
    (
        "run_misnamed_args",
        &["value_schema_breaking_arguments"],
        "broken_args_never_ran",
    ),
];

/// The table's `rows` on `wire` with `extra` arguments under a fresh mark:
/// the report, stdout and the exit code; nothing left running.
fn run(rows: &[&str], wire: &str, extra: &[&str]) -> (serde_json::Value, String, Option<i32>) {
    let only = rows.join(",");
    let mut args = vec!["value_faults.yaml", "--only", &only];
    args.extend_from_slice(extra);
    run_report("value", wire, &args)
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
        assert!(stdout.contains("14 passed, 0 failed"), "{wire}: {stdout}");
        for id in ROWS {
            let judged = !NOT_VALUE.contains(id);
            let want = if judged { "pass" } else { "missing" };
            for check in [
                "request_loop",
                "one_result_per_id",
                "results_for_issued_ids",
            ] {
                assert_eq!(status(&report, id, check), want, "{wire} {id} {check}");
            }
            let want = if BROKEN_ARGS.contains(id) {
                "pass"
            } else {
                "missing"
            };
            assert_eq!(
                status(&report, id, "broken_args_never_ran"),
                want,
                "{wire} {id}"
            );
            assert_eq!(status(&report, id, "fault_served"), "pass", "{wire} {id}");
        }
        // The reference agent continues a cut answer once, with the partial
        // kept once; on the random row, a first call drawn empty ends the
        // turn before any cut (then `not checked`, naming why).
        assert_eq!(
            status(&report, "value_cut_for_length", "partial_sent_once"),
            "pass"
        );
        let random = status(&report, "value_empty_or_cut_at_random", "partial_sent_once");
        assert!(
            ["pass", "not_checked"].contains(&random),
            "{wire}: {random}"
        );
        // The cut row's only journalling call was cut: its exactly-once
        // checks have no well-formed call to judge.
        let skipped: Vec<String> = skipped_checks(&report, &[])
            .into_iter()
            .filter(|c| {
                let cut_row = c.starts_with("\"value_tool_args_cut_for_length\"")
                    && (c.contains("no_side_effect_twice")
                        || c.contains("finished_calls_journalled_once"));
                let random_row = c.starts_with("\"value_empty_or_cut_at_random\"")
                    && c.contains("partial_sent_once");
                // Its doubled arguments are broken JSON to an agent that
                // joins frames as they come: nothing ran, nothing to count.
                let doubled_row = c.starts_with("\"value_duplicated_stream_frames\"")
                    && c.contains("no_side_effect_twice");
                !(cut_row || random_row || doubled_row)
            })
            .collect();
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
