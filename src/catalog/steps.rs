//! What `chaosrun agents check` says: the smoke table's report (check.yaml
//! run against the agent) mapped to its steps, each `ok`, `FAILED` naming the
//! check that broke with a hint at the part of the profile to look at, or
//! `not checked` with why. Pure: a report in, steps and an exit code out.
//!
//! A step is one row's checks, except the store: every store check (the
//! store-integrity class and the `store_*` history checks) of every row
//! that ran makes the `store read` step, and no other step, so a wrong
//! `store.path` names the store and not every row that wrote one.

use crate::oracle::{ErrorCause, Invariant, Status};
use crate::report::document::{Check, Report, Scenario};
use crate::runner::Verdict;

/// One step: its name, the check.yaml row whose checks make it (`None`: the
/// store's, from every row), and the checks that name its failure first
/// when several failed (after [`FIRST`]).
pub struct StepDef {
    pub name: &'static str,
    pub row: Option<&'static str>,
    pub key: &'static [&'static str],
}

/// The checks that name any step's failure first: the agent did not start,
/// or broke the driver protocol, so nothing after it could work.
const FIRST: &[&str] = &["boots", "protocol"];

/// The steps, in order.
pub const STEPS: &[StepDef] = &[
    StepDef {
        name: "start",
        row: Some("check_start"),
        key: &["faulted_turn_ends", "outcome"],
    },
    StepDef {
        name: "tool call",
        row: Some("check_tool_call"),
        key: &["own_outputs", "wire_tool_results"],
    },
    StepDef {
        name: "resume",
        row: Some("check_resume"),
        key: &["resumes_after_kill", "probe_answered"],
    },
    StepDef {
        name: "store read",
        row: None,
        key: &["store_written", "integrity_check", "store_tool_results"],
    },
    StepDef {
        name: "mcp listing",
        row: Some("check_mcp"),
        key: &["mcp_call_arrived", "mcp_tool_offered"],
    },
];

/// How one step came out.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Ok,
    Failed(Failure),
    NotChecked(String),
}

/// A failed step.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The check that names the failure (`error`: chaosrun could not run
    /// the row, `no verdict`: the report holds no run of it).
    pub check: String,
    /// Its first violation, or the error's cause (whole; may span lines).
    pub message: String,
    /// The step's other failed checks, each once.
    pub also: Vec<String>,
    /// Where in the profile to look.
    pub hint: String,
    /// The check.yaml rows that rerun it with its evidence kept.
    pub rows: Vec<&'static str>,
    /// The start step's failure too (the agent never reached the provider):
    /// said once, at `start`.
    pub as_start: bool,
}

/// One step of the smoke.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub name: &'static str,
    pub outcome: Outcome,
}

/// A hint when the agent never reached the provider: every step needs that.
const NEVER_STARTED: &str = "the agent never reached chaosrun's model provider: look at the \
     profile's `command` or `exec` argv (a flag this version renamed or dropped), its `env`, and \
     the setting its `home_files` give the base URL ({{base_url}}) in";

/// The steps of a report of check.yaml.
pub fn steps(report: &Report) -> Vec<Step> {
    let mut out: Vec<Step> = STEPS
        .iter()
        .map(|def| Step {
            name: def.name,
            outcome: match def.row {
                Some(id) => row_step(def, id, entry(report, id)),
                None => store_step(def, report),
            },
        })
        .collect();
    let never_started = |o: &Outcome| matches!(o, Outcome::Failed(f) if f.hint == NEVER_STARTED);
    if out.first().is_some_and(|s| never_started(&s.outcome)) {
        for s in &mut out[1..] {
            if let Outcome::Failed(f) = &mut s.outcome {
                f.as_start = f.hint == NEVER_STARTED;
            }
        }
    }
    out
}

/// 0 when no step failed (a step not checked is no failure, and no pass),
/// else 1.
pub fn exit_code(steps: &[Step]) -> u8 {
    u8::from(
        steps
            .iter()
            .any(|s| matches!(s.outcome, Outcome::Failed(_))),
    )
}

/// The last run of row `id` in the report.
fn entry<'a>(report: &'a Report, id: &str) -> Option<&'a Scenario> {
    report.scenarios.iter().rev().find(|s| s.id == id)
}

/// Is this check about the agent's store (the `store read` step's)?
fn is_store(c: &Check) -> bool {
    c.invariant == Invariant::StoreIntegrity
        || c.name.starts_with("store_")
        || c.name == "persisted_size_bound"
}

fn is_failed(c: &Check) -> bool {
    matches!(c.status, Status::Fail { .. })
}

/// A failure that is no check's: a row's ERROR, or no run of it.
fn plain(check: &str, message: &str, hint: String, rows: Vec<&'static str>) -> Outcome {
    Outcome::Failed(Failure {
        check: check.into(),
        message: message.into(),
        also: vec![],
        hint,
        rows,
        as_start: false,
    })
}

/// A failed step from its failed checks (at least one), the step's key
/// checks first.
fn failed(def: &StepDef, mut failures: Vec<&Check>, rows: Vec<&'static str>) -> Outcome {
    let keys: Vec<&str> = FIRST.iter().chain(def.key).copied().collect();
    let rank = |c: &&Check| keys.iter().position(|k| *k == c.name).unwrap_or(keys.len());
    failures.sort_by_key(rank);
    let mut names: Vec<&str> = Vec::new();
    for c in &failures {
        if !names.contains(&c.name.as_str()) {
            names.push(&c.name);
        }
    }
    let message = match &failures[0].status {
        Status::Fail { violations } => violations.first().cloned().unwrap_or_default(),
        _ => String::new(),
    };
    Outcome::Failed(Failure {
        check: names[0].into(),
        message,
        also: names[1..].iter().map(|n| n.to_string()).collect(),
        hint: hint(def.name, &names),
        rows,
        as_start: false,
    })
}

/// A row's step: its verdict and its checks other than the store's.
fn row_step(def: &StepDef, id: &'static str, entry: Option<&Scenario>) -> Outcome {
    let Some(s) = entry else {
        let why = "the report holds no run of this row (the smoke was cut short)";
        return plain("no verdict", why, String::new(), vec![id]);
    };
    let never_started = s.calls.main == 0;
    match &s.verdict {
        Verdict::NotApplicable { reason } => return Outcome::NotChecked(reason.to_string()),
        Verdict::Error { cause } if !matches!(cause, ErrorCause::Store(_)) => {
            let hint = if never_started {
                NEVER_STARTED.into()
            } else {
                hint(def.name, &[])
            };
            return plain("error", &cause.to_string(), hint, vec![id]);
        }
        _ => {}
    }
    let failures: Vec<&Check> = s
        .checks
        .iter()
        .filter(|c| !is_store(c) && is_failed(c))
        .collect();
    if failures.is_empty() {
        return Outcome::Ok;
    }
    let mut out = failed(def, failures, vec![id]);
    if let Outcome::Failed(f) = &mut out {
        if never_started {
            f.hint = NEVER_STARTED.into();
        } else if let Some(h) = result_came_back(def.name, s) {
            f.hint = h.into();
        }
    }
    out
}

/// The hint of a tool step whose tool worked: its result came back to the
/// model with what the row asked for (`own_outputs`, `tool_result_contains`
/// held), so the tool mapping is right and something after the result
/// failed.
fn result_came_back(step: &str, s: &Scenario) -> Option<&'static str> {
    let held = match step {
        "tool call" => "own_outputs",
        "mcp listing" => "tool_result_contains",
        _ => return None,
    };
    s.checks
        .iter()
        .any(|c| c.name == held && c.status == Status::Pass)
        .then_some(RESULT_CAME_BACK)
}

/// [`result_came_back`]'s hint.
const RESULT_CAME_BACK: &str = "the tool ran and its result came back to the model, so the \
     profile's tool mapping is right: what failed came after the result. Look at the row's \
     requests.jsonl (--artifacts DIR): what the agent sent after the result and what it was \
     answered, and at how the profile reads a turn's end (`exec.final`, `exec.failed`)";

/// The store step: the store checks of every row that ran, and an ERROR
/// that names the profile's store mapping.
fn store_step(def: &StepDef, report: &Report) -> Outcome {
    let ran: Vec<(&'static str, &Scenario)> = STEPS
        .iter()
        .filter_map(|d| d.row.and_then(|id| Some((id, entry(report, id)?))))
        .filter(|(_, s)| !matches!(s.verdict, Verdict::NotApplicable { .. }))
        .collect();
    for (id, s) in &ran {
        if let Verdict::Error { cause } = &s.verdict {
            if matches!(cause, ErrorCause::Store(_)) {
                return plain("error", &cause.to_string(), hint(def.name, &[]), vec![id]);
            }
        }
    }
    let checks = || {
        ran.iter()
            .flat_map(|(id, s)| s.checks.iter().map(move |c| (*id, c)))
            .filter(|(_, c)| is_store(c))
    };
    let failures: Vec<(&'static str, &Check)> = checks().filter(|(_, c)| is_failed(c)).collect();
    if !failures.is_empty() {
        let mut rows: Vec<&'static str> = failures.iter().map(|(id, _)| *id).collect();
        rows.dedup();
        return failed(def, failures.into_iter().map(|(_, c)| c).collect(), rows);
    }
    if checks().any(|(_, c)| c.status == Status::Pass) {
        return Outcome::Ok;
    }
    Outcome::NotChecked(
        checks()
            .find_map(|(_, c)| match &c.status {
                Status::NotChecked { reason } => Some(reason.clone()),
                _ => None,
            })
            .unwrap_or_else(|| "no row that reads the store ran".into()),
    )
}

/// Where in the profile to look, for step `name` whose failed checks are
/// `failed` (an agent that never reached the provider is [`NEVER_STARTED`]).
fn hint(name: &str, failed: &[&str]) -> String {
    let text = match name {
        "start" => "the agent reached the provider but its turn was not read as the answer it got: look at how the profile reads a turn's end (`exec.final`, `exec.failed`), the driver's CHAOS events, or an ACP agent's `agent_message_chunk` text and `stopReason`",
        "tool call" => "look at the profile's `tools.shell`: the agent's name for its shell tool and for its `command` argument (this version may have renamed either)",
        "resume" => "look at how the profile resumes a session after a kill: `exec.resume` and the `exec.capture` it uses (the session id), `acp.load` (an ACP agent: `session/load` after a kill), or `resume: false` if this version cannot resume",
        "store read" if failed.contains(&"store_written") => "look at the profile's `store.path` (or `store.jsonl`): the file this version writes its session to (compare with the files under the run's HOME: --artifacts DIR keeps them)",
        "store read" => "look at the profile's `store` mapping (`store.messages_sql` or `store.records`) and `exec.store_session`: how this version's store holds a session's messages",
        "mcp listing" => "look at the profile's MCP registration: the config its `home_files` (or `exec` argv) render with {{mcp_command}} {{mcp_args_json}} or {{mcp_url}}, `mcp.transports`, and `tools.mcp_probe` (the agent's name for the chaos server's `probe` tool)",
        _ => "",
    };
    text.into()
}

/// The indent of the lines under a step's.
const UNDER: &str = "               ";

/// The steps as `agents check` prints them, one line each (a failure adds
/// the end of a long message, its hint and the command that reruns its rows
/// with evidence kept), then one line of summary.
pub fn render(steps: &[Step], agent: &str) -> String {
    render_warned(steps, &[], agent)
}

/// [`render`], with the smoke's run-wide warnings (a knob the profile
/// declares and renders nowhere, a log path never found) between the steps
/// and the summary, one `warning:` line each: a warning fails no step.
pub fn render_warned(steps: &[Step], warnings: &[String], agent: &str) -> String {
    let mut out = String::new();
    for s in steps {
        let head = format!("{:<12}", s.name);
        match &s.outcome {
            Outcome::Ok => out.push_str(&format!("{head} ok\n")),
            Outcome::NotChecked(why) => {
                let first = why.lines().next().unwrap_or("");
                out.push_str(&format!("{head} not checked: {}\n", clip(first)));
            }
            Outcome::Failed(f) if f.as_start => out.push_str(&format!(
                "{head} FAILED: {}, as at start (the agent never reached the provider)\n",
                f.check
            )),
            Outcome::Failed(f) => out.push_str(&failure(&head, f, agent)),
        }
    }
    if !warnings.is_empty() {
        out.push('\n');
    }
    for w in warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out.push_str(&summary(steps));
    out
}

fn clip(line: &str) -> String {
    crate::units::clip(line, 300)
}

/// A failed step's lines: the check and the first line of its message, the
/// message's last lines (a stderr tail ends with the error), the checks
/// that also failed, the hint and the rerun.
fn failure(head: &str, f: &Failure, agent: &str) -> String {
    let mut lines = f.message.lines();
    let mut out = format!(
        "{head} FAILED: {}: {}\n",
        f.check,
        clip(lines.next().unwrap_or(""))
    );
    let rest: Vec<&str> = lines.filter(|l| !l.trim().is_empty()).collect();
    if rest.len() > 4 {
        out.push_str(&format!("{UNDER}| …\n"));
    }
    for l in &rest[rest.len().saturating_sub(4)..] {
        out.push_str(&format!("{UNDER}| {}\n", clip(l)));
    }
    if !f.also.is_empty() {
        out.push_str(&format!("{UNDER}also failed: {}\n", f.also.join(", ")));
    }
    if !f.hint.is_empty() {
        out.push_str(&format!("{UNDER}hint: {}\n", f.hint));
    }
    out.push_str(&format!(
        "{UNDER}evidence: chaosrun --agent {agent} check.yaml --only {} --artifacts DIR\n",
        f.rows.join(" --only ")
    ));
    out
}

fn summary(steps: &[Step]) -> String {
    let count = |f: fn(&Outcome) -> bool| steps.iter().filter(|s| f(&s.outcome)).count();
    let bad = count(|o| matches!(o, Outcome::Failed(_)));
    let unchecked = count(|o| matches!(o, Outcome::NotChecked(_)));
    let ok = steps.len() - bad - unchecked;
    match (bad, unchecked) {
        (0, 0) => format!("\nthe profile drives this agent: {ok} step(s) ok\n"),
        (0, n) => format!("\nno step failed: {ok} ok, {n} not checked (never a pass)\n"),
        (b, 0) => format!("\n{b} step(s) FAILED, {ok} ok\n"),
        (b, n) => format!("\n{b} step(s) FAILED, {ok} ok, {n} not checked\n"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn pass(inv: &str, name: &str) -> Value {
        json!({"invariant": inv, "name": name, "status": "pass"})
    }

    fn fail(inv: &str, name: &str, why: &str) -> Value {
        json!({"invariant": inv, "name": name, "status": "fail", "violations": [why]})
    }

    fn skipped(inv: &str, name: &str, why: &str) -> Value {
        json!({"invariant": inv, "name": name, "status": "not_checked", "reason": why})
    }

    /// A healthy run of row `id`: its row checks and a store that reads.
    fn healthy(id: &str) -> Value {
        json!({
            "id": id, "verdict": "pass", "calls": {"main": 2, "probe": 1, "aux": 0},
            "checks": [
                pass("termination", "faulted_turn_ends"),
                pass("reusability", "probe_answered"),
                pass("history_integrity", "store_tool_results"),
                pass("store_integrity", "integrity_check"),
            ],
        })
    }

    fn report(rows: Vec<Value>) -> Report {
        serde_json::from_value(json!({
            "schema": crate::report::document::SCHEMA, "agent": "a", "selected": [],
            "scenarios": rows,
        }))
        .unwrap()
    }

    fn all_healthy() -> Vec<Value> {
        [
            "check_start",
            "check_tool_call",
            "check_resume",
            "check_mcp",
        ]
        .into_iter()
        .map(healthy)
        .collect()
    }

    fn outcome<'a>(steps: &'a [Step], name: &str) -> &'a Outcome {
        &steps.iter().find(|s| s.name == name).unwrap().outcome
    }

    fn failure(o: &Outcome) -> &Failure {
        match o {
            Outcome::Failed(f) => f,
            other => panic!("not failed: {other:?}"),
        }
    }

    fn failed_check(o: &Outcome) -> (&str, &str) {
        let f = failure(o);
        (&f.check, &f.hint)
    }

    #[test]
    fn a_healthy_smoke_is_every_step_ok_and_exit_0() {
        let s = steps(&report(all_healthy()));
        assert_eq!(
            s.iter().map(|s| s.name).collect::<Vec<_>>(),
            ["start", "tool call", "resume", "store read", "mcp listing"]
        );
        assert!(s.iter().all(|s| s.outcome == Outcome::Ok), "{s:?}");
        assert_eq!(exit_code(&s), 0);
        assert!(render(&s, "x").ends_with("the profile drives this agent: 5 step(s) ok\n"));
    }

    /// A wrong tool name fails the tool step alone, naming the check and the
    /// profile's `tools.shell`.
    #[test]
    fn a_lost_tool_output_names_the_tool_mapping() {
        let mut rows = all_healthy();
        rows[1]["verdict"] = json!("fail");
        rows[1]["checks"].as_array_mut().unwrap().push(fail(
            "history_integrity",
            "own_outputs",
            "tool call c1 carried another output",
        ));
        let s = steps(&report(rows));
        let (check, hint) = failed_check(outcome(&s, "tool call"));
        assert_eq!(check, "own_outputs");
        assert!(hint.contains("`tools.shell`"), "{hint}");
        assert_eq!(s.iter().filter(|s| s.outcome != Outcome::Ok).count(), 1);
        assert_eq!(exit_code(&s), 1);
        let text = render(&s, "my.yaml");
        assert!(
            text.contains(
                "tool call    FAILED: own_outputs: tool call c1 carried another output\n"
            ),
            "{text}"
        );
        assert!(text.contains("--agent my.yaml check.yaml --only check_tool_call --artifacts DIR"));
        assert!(text.ends_with("\n1 step(s) FAILED, 4 ok\n"), "{text}");
    }

    /// A tool whose result came back (`own_outputs`, `tool_result_contains`
    /// held) is not the tool mapping's fault: the step's hint says the
    /// mapping is right and points after the result, not at `tools.shell`
    /// (Claude Code 2.1.303, when a note after each result hid it).
    #[test]
    fn a_step_whose_result_came_back_does_not_blame_the_tool_mapping() {
        let mut rows = all_healthy();
        for (row, held) in [(1, "own_outputs"), (3, "tool_result_contains")] {
            rows[row]["verdict"] = json!("fail");
            let checks = rows[row]["checks"].as_array_mut().unwrap();
            checks.push(pass("history_integrity", held));
            checks.push(fail(
                "provider_calls",
                "call_bound",
                "5 main calls, at most 4",
            ));
        }
        let s = steps(&report(rows));
        for step in ["tool call", "mcp listing"] {
            let (check, hint) = failed_check(outcome(&s, step));
            assert_eq!(check, "call_bound", "{step}");
            assert_eq!(hint, RESULT_CAME_BACK, "{step}");
        }
    }

    /// A store that was never written fails every row's store check: only
    /// the store step fails, naming `store.path`; the rows' steps pass.
    #[test]
    fn a_missing_store_fails_the_store_step_alone() {
        let mut rows = all_healthy();
        for r in &mut rows {
            r["verdict"] = json!("fail");
            r["checks"] = json!([
                pass("termination", "faulted_turn_ends"),
                skipped(
                    "history_integrity",
                    "store_tool_results",
                    "the store x does not exist"
                ),
                fail(
                    "store_integrity",
                    "store_written",
                    "the store x named by the profile does not exist"
                ),
                skipped("store_integrity", "integrity_check", "no store to check"),
            ]);
        }
        let s = steps(&report(rows));
        let (check, hint) = failed_check(outcome(&s, "store read"));
        assert_eq!(check, "store_written");
        assert!(hint.contains("`store.path`"), "{hint}");
        let f = failure(outcome(&s, "store read"));
        assert!(f.also.is_empty(), "each check named once: {f:?}");
        assert_eq!(
            f.rows,
            STEPS.iter().filter_map(|d| d.row).collect::<Vec<_>>()
        );
        for step in ["start", "tool call", "resume", "mcp listing"] {
            assert_eq!(outcome(&s, step), &Outcome::Ok, "{step}");
        }
    }

    /// A store query the profile got wrong is an ERROR of every row: the
    /// store step names it; the rows are judged by their own checks.
    #[test]
    fn a_store_query_error_is_the_store_steps() {
        let mut rows = all_healthy();
        let cause = "the adapter profile's store query failed on x: no such table; fix `store.messages_sql` (…)";
        for r in &mut rows {
            r["verdict"] = json!("error");
            r["cause"] = json!(cause);
        }
        let s = steps(&report(rows));
        let (check, hint) = failed_check(outcome(&s, "store read"));
        assert_eq!(check, "error");
        assert!(hint.contains("`store.messages_sql`"), "{hint}");
        assert_eq!(outcome(&s, "start"), &Outcome::Ok);
        assert_eq!(exit_code(&s), 1);
    }

    /// An upstream's error text is the upstream's words (its response body
    /// may say anything, `store.messages_sql` too): the cause is typed
    /// `Upstream`, the row's own error, never taken for the store mapping's
    /// (it was, when the cause's words were searched for the store keys).
    #[test]
    fn an_upstream_error_that_mentions_the_store_stays_the_rows() {
        let mut rows = all_healthy();
        let cause = "the upstream could not serve the scenario: 500 {\"error\": \"fix `store.messages_sql`\"}";
        rows[0]["verdict"] = json!("error");
        rows[0]["cause"] = json!(cause);
        let s = steps(&report(rows));
        let (check, _) = failed_check(outcome(&s, "start"));
        assert_eq!(check, "error");
        assert_eq!(outcome(&s, "store read"), &Outcome::Ok);
    }

    /// An agent that never reached the provider: every row step fails, and
    /// the hint names the command, env and base URL, not the step's part.
    #[test]
    fn no_provider_call_points_at_the_command() {
        let mut rows = all_healthy();
        let tail = "the agent exited before it was ready (code 1); stderr tail:\n\
                    Traceback (most recent call last):\n  a\n  b\n  c\n  d\nKeyError: 'base_url'";
        for r in &mut rows {
            r["verdict"] = json!("fail");
            r["calls"]["main"] = json!(0);
            r["checks"] = json!([
                fail("exercised", "fault_served", "no rule answered"),
                fail("termination", "boots", tail),
            ]);
        }
        let s = steps(&report(rows));
        for step in ["start", "tool call", "resume", "mcp listing"] {
            let f = failure(outcome(&s, step));
            assert_eq!((&*f.check, &*f.hint), ("boots", NEVER_STARTED), "{step}");
            assert_eq!(f.also, ["fault_served"], "the key check first");
            assert_eq!(f.as_start, step != "start", "{step}");
        }
        assert!(matches!(outcome(&s, "store read"), Outcome::NotChecked(_)));
        let text = render(&s, "a");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "start        FAILED: boots: the agent exited before it was ready (code 1); stderr tail:"
        );
        assert_eq!(lines[1].trim(), "| …", "{text}");
        assert_eq!(lines[5].trim(), "| KeyError: 'base_url'", "{text}");
        assert!(text.contains(
            "\ntool call    FAILED: boots, as at start (the agent never reached the provider)\n"
        ));
        assert_eq!(text.matches("hint: ").count(), 1, "{text}");
    }

    /// Rows the profile cannot express are not checked with the run's
    /// reason, never ok, and do not fail the smoke; an ERROR that is not
    /// the store's fails its step with the cause.
    #[test]
    fn not_applicable_rows_are_not_checked_and_errors_fail() {
        let mut rows = all_healthy();
        rows[2] = json!({"id": "check_resume", "verdict": "not_applicable",
            "reason": "the profile declares resume: false", "checks": []});
        rows[3] = json!({"id": "check_mcp", "verdict": "not_applicable",
            "reason": "the profile declares no mcp", "checks": []});
        let s = steps(&report(rows.clone()));
        assert_eq!(
            outcome(&s, "resume"),
            &Outcome::NotChecked("the profile declares resume: false".into())
        );
        assert_eq!(exit_code(&s), 0);
        let text = render(&s, "a");
        assert!(
            text.contains("mcp listing  not checked: the profile declares no mcp\n"),
            "{text}"
        );
        assert!(
            text.ends_with("\nno step failed: 3 ok, 2 not checked (never a pass)\n"),
            "{text}"
        );

        rows[0] = json!({"id": "check_start", "verdict": "error", "cause": "the scenario could not be run: spawn failed",
            "calls": {"main": 0, "probe": 0, "aux": 0}, "checks": []});
        let s = steps(&report(rows));
        let (check, hint) = failed_check(outcome(&s, "start"));
        assert_eq!((check, hint), ("error", NEVER_STARTED));
        assert_eq!(
            outcome(&s, "store read"),
            &Outcome::Ok,
            "the tool row's store read"
        );
    }

    /// A profile with no store: the store step is not checked, with why.
    #[test]
    fn no_store_is_not_checked_and_a_missing_row_fails() {
        let mut rows = all_healthy();
        for r in &mut rows {
            r["checks"] = json!([
                pass("termination", "faulted_turn_ends"),
                skipped(
                    "store_integrity",
                    "integrity_check",
                    "the adapter profile names no durable store"
                ),
            ]);
        }
        rows.pop();
        let s = steps(&report(rows));
        assert_eq!(
            outcome(&s, "store read"),
            &Outcome::NotChecked("the adapter profile names no durable store".into())
        );
        assert_eq!(failed_check(outcome(&s, "mcp listing")).0, "no verdict");
        assert_eq!(exit_code(&s), 1);
    }

    /// Every row a step names is in the built-in check.yaml, and every row
    /// of it is a step's.
    #[test]
    fn the_steps_name_exactly_the_rows_of_check_yaml() {
        let table =
            crate::scenarios::load::load_str(super::super::tables::CHECK, "check.yaml").unwrap();
        let ids: Vec<&str> = table.scenarios.iter().map(|s| s.id.as_str()).collect();
        let rows: Vec<&str> = STEPS.iter().filter_map(|d| d.row).collect();
        assert_eq!(ids, rows);
    }
}
