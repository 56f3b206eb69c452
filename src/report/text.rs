//! The plain-text report: a line per scenario as it finishes (PASS, FAIL,
//! ERROR or N/A, seconds, provider calls), then each failure's violations with
//! their evidence and what could not be checked, each error's cause, the N/A
//! scenarios apart, then `N passed, N failed[, N errors][, N not applicable]`.
//! Control characters in anything it prints are escaped.

use std::io::Write;
use std::sync::Arc;

use super::Reporter;
use crate::runner::{RunEvent, ScenarioResult, Verdict};

/// `writeln!` with control characters escaped ([`crate::term::escape`]): the
/// report quotes what the agent said and wrote.
macro_rules! put {
    ($out:expr, $($arg:tt)*) => {{
        let text = format!($($arg)*);
        let _ = writeln!($out, "{}", crate::term::escape(&text));
    }};
}

/// Writes the report to any writer (stdout in the CLI, a buffer in tests).
pub struct Text<W: Write + Send> {
    out: W,
    results: Vec<Arc<ScenarioResult>>,
    width: usize,
    /// Run-wide warnings, printed before the closing lines.
    warnings: Vec<String>,
}

impl<W: Write + Send> Text<W> {
    pub fn new(out: W) -> Self {
        Text {
            out,
            warnings: Vec::new(),
            results: Vec::new(),
            width: 44,
        }
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

fn indent(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|l| format!("{prefix}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `  OOM-killed under 94 MB (cgroup v1 memory.limit_in_bytes)` where the
/// kernel OOM-killed the agent's processes (an `oom` row).
fn oom_killed(obs: &crate::observe::Observation) -> Option<String> {
    obs.events.iter().find_map(|t| match &t.event {
        crate::observe::Event::OomKill {
            via,
            limit_mb,
            oom_kills,
            ..
        } if *oom_kills > 0 => Some(format!("  OOM-killed under {limit_mb:.0} MB ({via})")),
        _ => None,
    })
}

/// The scenario line: `PASS  id   12.3 s   3 calls  41 MB`: the verdict,
/// seconds, main calls, the agent's peak memory where it was measured.
pub fn scenario_line(r: &ScenarioResult, width: usize) -> String {
    let rec = &r.observation.recording;
    let not_checked = r.not_checked().count();
    let id = if r.attempts > 1 {
        format!("{} [{}/{}]", r.id, r.attempt, r.attempts)
    } else {
        r.id.clone()
    };
    let mut line = format!(
        "{:<5} {:<width$} {:>6.1} s  {:>3} call{}",
        r.verdict.label(),
        id,
        r.seconds,
        rec.main_calls,
        if rec.main_calls == 1 { " " } else { "s" },
    );
    if let Some(p) = crate::oracle::memory::peak(&r.observation) {
        line.push_str(&format!("  {:>4.0} MB", p.mb()));
    }
    if let Some(oom) = oom_killed(&r.observation) {
        line.push_str(&oom);
    }
    if not_checked > 0 {
        line.push_str(&format!("  ({not_checked} not checked)"));
    }
    if let Some(c) = &r.observation.chaos {
        let (kills, stops) = r.observation.faults_landed_working();
        let (k, s) = r.observation.faults_landed();
        let early = match k + s - kills - stops {
            0 => String::new(),
            n => format!(", {n} more in start-up (not counted)"),
        };
        line.push_str(&format!(
            "  [chaos seed {}: {kills} kills, {stops} stops landed{early} of {} scheduled]",
            c.seed,
            c.schedule.len()
        ));
    }
    if let Some(note) = r.observation.capped.note() {
        line.push_str(&format!("  [{note}]"));
    }
    // A row run in part says so under its line, whatever its verdict.
    for c in r
        .not_checked()
        .filter(|c| c.name == crate::oracle::schedule::NAME)
    {
        line.push_str(&format!(
            "\n      ran in part ({} / {}): {}",
            c.invariant.label(),
            c.name,
            c.not_checked_reason().unwrap_or_default()
        ));
    }
    line
}

/// Every violation of a failed scenario (or an error's cause), and what was
/// not checked: the checks not checked for one reason on one line.
pub fn failure_detail(r: &ScenarioResult) -> String {
    failure_detail_but(r, &[])
}

/// A check not checked, and why: (`invariant / name`, reason).
type Unchecked = (String, String);

/// What `r` did not check, one entry per check.
fn unchecked(r: &ScenarioResult) -> Vec<Unchecked> {
    r.not_checked()
        .map(|c| {
            (
                format!("{} / {}", c.invariant.label(), c.name),
                c.not_checked_reason().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// `  not checked{what}: A, B: reason` lines, the checks of one reason on
/// one line, reasons in first-seen order.
fn unchecked_lines(list: &[Unchecked], what: &str) -> String {
    let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
    for (check, why) in list {
        match reasons.iter_mut().find(|(r, _)| r == why) {
            Some((_, checks)) => checks.push(check),
            None => reasons.push((why, vec![check])),
        }
    }
    reasons
        .into_iter()
        .map(|(why, checks)| format!("  not checked{what}: {}: {why}\n", checks.join(", ")))
        .collect()
}

/// What every one of `failures` (two or more) did not check for the same
/// reason: said once above them, not under each.
fn unchecked_in_all(failures: &[&ScenarioResult]) -> Vec<Unchecked> {
    let [first, rest @ ..] = failures else {
        return Vec::new();
    };
    if rest.is_empty() {
        return Vec::new();
    }
    let others: Vec<Vec<Unchecked>> = rest.iter().map(|r| unchecked(r)).collect();
    unchecked(first)
        .into_iter()
        .filter(|u| others.iter().all(|o| o.contains(u)))
        .collect()
}

/// [`failure_detail`] leaving out what `shared` says once for the run.
fn failure_detail_but(r: &ScenarioResult, shared: &[Unchecked]) -> String {
    let mut s = if r.attempts > 1 {
        format!(
            "{} {} [{}/{}]\n",
            r.verdict.label(),
            r.id,
            r.attempt,
            r.attempts
        )
    } else {
        format!("{} {}\n", r.verdict.label(), r.id)
    };
    if let Verdict::Error { cause } = &r.verdict {
        s.push_str(&indent(&cause.to_string(), "  "));
        s.push('\n');
    }
    for c in r.failures() {
        s.push_str(&format!("  {} / {}:\n", c.invariant.label(), c.name));
        for v in c.violations() {
            s.push_str(&indent(v, "    "));
            s.push('\n');
        }
    }
    let own: Vec<Unchecked> = unchecked(r)
        .into_iter()
        .filter(|u| !shared.contains(u))
        .collect();
    s.push_str(&unchecked_lines(&own, ""));
    if let Some(dir) = &r.artifacts {
        s.push_str(&format!("  artifacts: {}\n", dir.display()));
    }
    s
}

/// (id, passed runs, runs) per scenario, in first-seen order; empty unless
/// scenarios were repeated.
pub fn pass_rates(results: &[Arc<ScenarioResult>]) -> Vec<(String, u32, u32)> {
    let mut out: Vec<(String, u32, u32)> = Vec::new();
    for r in results.iter().filter(|r| r.attempts > 1) {
        match out.iter_mut().find(|(id, _, _)| *id == r.id) {
            Some(e) => {
                e.1 += u32::from(r.passed());
                e.2 += 1;
            }
            None => out.push((r.id.clone(), u32::from(r.passed()), 1)),
        }
    }
    out
}

impl<W: Write + Send> Reporter for Text<W> {
    fn on(&mut self, event: &RunEvent) {
        match event {
            RunEvent::Started { .. } => {}
            RunEvent::ScenarioFinished(r) => {
                put!(self.out, "{}", scenario_line(r, self.width));
                let _ = self.out.flush();
                self.results.push(r.clone());
            }
            RunEvent::Finished { stats, wall } => {
                let failures: Vec<&ScenarioResult> = self
                    .results
                    .iter()
                    .filter(|r| matches!(r.verdict, Verdict::Fail | Verdict::Error { .. }))
                    .map(|r| &**r)
                    .collect();
                if !failures.is_empty() {
                    put!(self.out, "\nfailures:\n");
                    let shared = unchecked_in_all(&failures);
                    if !shared.is_empty() {
                        put!(
                            self.out,
                            "{}",
                            unchecked_lines(&shared, " in every failed row")
                        );
                    }
                    for r in failures {
                        put!(self.out, "{}", failure_detail_but(r, &shared));
                    }
                }
                let na: Vec<&ScenarioResult> = self
                    .results
                    .iter()
                    .filter(|r| matches!(r.verdict, Verdict::NotApplicable { .. }))
                    .map(|r| &**r)
                    .collect();
                if !na.is_empty() {
                    put!(self.out, "\nnot applicable (not counted as passed):");
                    for r in na {
                        put!(
                            self.out,
                            "  {:<44} {}",
                            r.id,
                            r.verdict.detail().unwrap_or_default()
                        );
                    }
                }
                let rates = pass_rates(&self.results);
                if !rates.is_empty() {
                    put!(self.out, "\npass rate per scenario:");
                    for (id, passed, runs) in rates {
                        let flag = match passed {
                            0 => "  fails",
                            p if p == runs => "",
                            _ => "  FLAKY",
                        };
                        put!(self.out, "  {id:<44} {passed}/{runs}{flag}");
                    }
                }
                for w in &self.warnings {
                    put!(self.out, "\nwarning: {w}");
                }
                put!(self.out, "\nwall time {wall:.1} s");
                put!(self.out, "{}", stats.summary());
                let _ = self.out.flush();
            }
            RunEvent::Warning(w) => self.warnings.push(w.clone()),
            RunEvent::ScenarioStarted { .. } | RunEvent::Phase { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::{Check, Invariant};
    use crate::report::test_support::{feed, sample_results, sample_with_error};

    /// What a person reads after a run with a failure, pinned: a change to it
    /// shows up as a snapshot diff to review, never silently.
    #[test]
    fn report_of_a_run_with_a_failure() {
        let mut text = Text::new(Vec::new());
        feed(&mut text, sample_results());
        let out = String::from_utf8(text.into_inner()).unwrap();
        insta::assert_snapshot!(out);
    }

    /// A check not checked for one reason in every failed row (a profile
    /// with no durable store) is said once above the failures, its checks
    /// on one line, never under each failure; one a single row did not
    /// check stays under it (issue 47.16).
    #[test]
    fn a_reason_every_failure_shares_is_said_once() {
        let mut results = sample_results();
        let why = "the adapter profile names no durable store";
        let mut bad = results.pop().unwrap();
        bad.checks.retain(|c| !c.not_checked());
        for (inv, name) in [
            (Invariant::HistoryIntegrity, "store_tool_results"),
            (Invariant::HistoryIntegrity, "persisted_size_bound"),
            (Invariant::StoreIntegrity, "integrity_check"),
        ] {
            bad.checks.push(Check::skipped(inv, name, why));
        }
        let mut other = bad.clone();
        other.id = "another_failure".into();
        other.checks.push(Check::skipped(
            Invariant::ProcessHygiene,
            "closed",
            "only here",
        ));
        results.extend([bad, other]);
        let mut text = Text::new(Vec::new());
        feed(&mut text, results);
        let out = String::from_utf8(text.into_inner()).unwrap();
        assert_eq!(out.matches(why).count(), 1, "{out}");
        assert!(
            out.contains("  not checked in every failed row: history integrity / store_tool_results, history integrity / persisted_size_bound, store integrity / integrity_check: the adapter profile names no durable store\n"),
            "{out}"
        );
        assert!(
            out.contains("  not checked: process hygiene / closed: only here\n"),
            "{out}"
        );
    }

    /// A scenario chaosrun could not run is an ERROR with its cause, in the
    /// closing count, never dropped.
    #[test]
    fn report_of_a_run_with_an_error() {
        let mut text = Text::new(Vec::new());
        feed(&mut text, sample_with_error());
        let out = String::from_utf8(text.into_inner()).unwrap();
        assert!(out.ends_with("1 passed, 1 failed, 1 error\n"), "{out}");
        insta::assert_snapshot!(out);
    }
}
