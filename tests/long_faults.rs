//! The long-fault table (long_faults.yaml, issues 44.8, 44.1, 44.7 and
//! 44.4): faults that take minutes. On every wire the reference agent passes
//! the three rows: `provider_outage_minute_clears` (every call a 503 for the turn's
//! first 75 s, then healthy), where it backs off (capped at 2 s) through the
//! whole outage, so its calls span it and its turn ends on the answer served
//! once it cleared; and `background_output_while_waiting` (a background job
//! streams 360 MB while the agent waits), whose output it leaves in the
//! job's log file: one copy on disk, nothing in memory; and
//! `subagent_outage_clears` (the subagent's calls all 503 for 20 s), whose
//! subagent backs off through the outage and hands its result to the
//! parent. With its bugs on,
//! each row fails on its one check alone: `outage_wedges_session` (30 s of
//! failed calls lose the session: that turn fails and every later one at
//! once, without a call) on `probe_answered`, `background_output_in_memory`
//! (the job's output kept in memory as it streams) on `memory_growth`,
//! `background_output_copied` (the output written to the job's log and,
//! through `tee`, to a log of every job's and a transcript copy: three
//! copies) on `disk_written`, `subagent_no_retry` (the subagent's first
//! error fails it) on `tool_result_contains`. The twelve runs go at once: each
//! mostly waits out the outage or the job.

mod common;

use common::*;

const OUTAGE: &str = "provider_outage_minute_clears";
const BACKGROUND: &str = "background_output_while_waiting";
const SUBAGENT: &str = "subagent_outage_clears";

/// Each bug and the row and check that catch it, by run: the bugs of a
/// run are on at once (each on its own row), the second run's on its row
/// alone (both of the background row's bugs take its output).
const BUGS: &[&[(&str, &str, &str)]] = &[
    &[
        ("outage_wedges_session", OUTAGE, "probe_answered"),
        ("background_output_copied", BACKGROUND, "disk_written"),
        ("subagent_no_retry", SUBAGENT, "tool_result_contains"),
    ],
    &[("background_output_in_memory", BACKGROUND, "memory_growth")],
];

/// Every wire the provider and the reference agent speak.
const WIRES: &[&str] = &["openai-chat", "openai-responses", "anthropic", "gemini"];

/// The table on `wire` with `extra` arguments under a fresh mark: the
/// report, stdout and the exit code; nothing left running.
fn run(wire: &str, extra: &[String]) -> (serde_json::Value, String, Option<i32>) {
    let mut args = vec!["long_faults.yaml"];
    args.extend(extra.iter().map(String::as_str));
    run_report("long", wire, &args)
}

/// What is wrong with a healthy run on `wire` (nothing: empty).
fn healthy(wire: &str, report: &serde_json::Value, stdout: &str, code: Option<i32>) -> Vec<String> {
    if code != Some(0) || !stdout.contains("3 passed, 0 failed") {
        return vec![format!("{wire}: exit {code:?}\n{stdout}")];
    }
    let mut problems = Vec::new();
    // Made, not `not checked`: in a healthy run every check of both rows
    // is judged.
    let skipped = skipped_checks(report, &[]);
    if !skipped.is_empty() {
        problems.push(format!("{wire}: skipped {skipped:#?}"));
    }
    // Backing off at most 2 s, it kept calling through the 75 s: some 40
    // main calls on an idle machine (0.2, 0.4, 0.8, 1.6 s, then 2 s apart,
    // fewer when each call takes longer under load), the last answered,
    // well under its 61 attempts.
    let row = scenario(report, OUTAGE);
    let calls = row["calls"]["main"].as_u64().unwrap_or(0);
    let seconds = row["seconds"].as_f64().unwrap_or(0.0);
    if !(20..=61).contains(&calls) || seconds < 75.0 {
        problems.push(format!(
            "{wire}: {calls} main calls in {seconds:.1} s: the outage was not ridden out"
        ));
    }
    problems
}

/// What is wrong with the run of bug set `set` on `wire`.
fn caught(
    set: usize,
    wire: &str,
    report: &serde_json::Value,
    stdout: &str,
    code: Option<i32>,
) -> Vec<String> {
    let mut problems = Vec::new();
    if code != Some(1) {
        problems.push(format!("bugs {set}, {wire}: exit {code:?}\n{stdout}"));
    }
    for (bug, row, check) in BUGS[set] {
        let failed = failed_checks(report, row);
        if failed != [*check] {
            problems.push(format!(
                "{bug}, {wire}, {row}: failed {failed:?}, expected only {check}: {:?}",
                violations(report, row)
            ));
        }
    }
    // The copies are seen where they are: the job's log and the log of
    // every job's output, in HOME.
    if set == 0 {
        let v = violations(report, BACKGROUND).join("\n");
        if !(v.contains("HOME/.refagent/bg/all-jobs.log") && v.contains(".refagent/bg/proc_")) {
            problems.push(format!(
                "background_output_copied, {wire}: the files are not named: {v}"
            ));
        }
    }
    problems
}

#[test]
fn the_long_rows_pass_and_each_bug_fails_its_one_check_on_every_wire() {
    let runs: Vec<_> = WIRES
        .iter()
        .flat_map(|w| [(*w, None), (*w, Some(0)), (*w, Some(1))])
        .map(|(w, set)| {
            let mut extra: Vec<String> = set.map_or(vec![], |i| {
                BUGS[i]
                    .iter()
                    .map(|(bug, _, _)| format!("--agent-arg=--bug={bug}"))
                    .collect()
            });
            if set == Some(1) {
                extra.extend(["--only".to_string(), BACKGROUND.to_string()]);
            }
            std::thread::spawn(move || (w, set, run(w, &extra)))
        })
        .collect();
    let mut problems = Vec::new();
    for h in runs {
        let (wire, set, (report, stdout, code)) = h.join().unwrap();
        problems.extend(match set {
            None => healthy(wire, &report, &stdout, code),
            Some(i) => caught(i, wire, &report, &stdout, code),
        });
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}
