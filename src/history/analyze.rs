//! Pure over a [`Window`]: per scenario, its outcome in each run, pass rate,
//! the run where it last changed, its label and its duration trend.
//!
//! Labels, over the scenario's runs in the window (oldest first; `n/a` runs
//! left out; a run's outcome is its worst attempt, `error` counting as a
//! failure):
//! - `NEW FAIL`: it failed in its latest run and passed in every earlier one;
//! - `FIXED`: it passed in its latest run and failed in every earlier one;
//! - `FLAKY`: its outcome changed more than once in the window, or one run's
//!   repeats (`--repeat`) disagreed;
//! - `FAIL` / `PASS`: otherwise, by the latest outcome (a single change longer
//!   ago is shown as the run where it last changed);
//! - `N/A`: it has no judged run in the window.

use std::collections::BTreeMap;

use serde::Serialize;

use super::store::{RunRow, ScenarioRow, Window};
use super::CheckRecord;

/// How many runs on each side the duration trend compares.
pub const TREND_RUNS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Label {
    #[serde(rename = "NEW FAIL")]
    NewFail,
    #[serde(rename = "FIXED")]
    Fixed,
    #[serde(rename = "FLAKY")]
    Flaky,
    #[serde(rename = "FAIL")]
    Fail,
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "N/A")]
    NotApplicable,
}

impl Label {
    pub fn as_str(self) -> &'static str {
        match self {
            Label::NewFail => "NEW FAIL",
            Label::Fixed => "FIXED",
            Label::Flaky => "FLAKY",
            Label::Fail => "FAIL",
            Label::Pass => "PASS",
            Label::NotApplicable => "N/A",
        }
    }
}

/// A run of the window, as the output lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunInfo {
    pub id: i64,
    pub started_ms: i64,
    pub agent: String,
    pub agent_version: Option<String>,
    pub commit: Option<String>,
    pub run_url: Option<String>,
}

/// One scenario's outcome in one run of the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub run: i64,
    /// `pass`, `fail`, `error`, `n/a`, or `null` when it did not run then.
    pub verdict: Option<String>,
    /// Median seconds over its attempts in that run.
    pub seconds: Option<f64>,
}

/// One scenario over the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trend {
    pub id: String,
    pub label: Label,
    /// Runs of the window in which it was judged (pass or not).
    pub runs: usize,
    pub passed: usize,
    pub pass_rate: Option<f64>,
    pub latest: String,
    /// The run where its outcome last changed, if it did in the window.
    pub changed_in: Option<i64>,
    /// Median seconds of the last [`TREND_RUNS`] runs.
    pub recent_seconds: Option<f64>,
    /// Change of that median against the [`TREND_RUNS`] runs before, as a
    /// fraction (+0.12 is 12% slower); `null` without enough runs.
    pub duration_trend: Option<f64>,
    /// One entry per run of the window, oldest first.
    pub outcomes: Vec<Outcome>,
    /// Checks that did not pass in its latest run.
    pub failing: Vec<CheckRecord>,
}

/// The whole answer of `chaosrun history`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub schema: &'static str,
    pub runs: Vec<RunInfo>,
    pub scenarios: Vec<Trend>,
    pub new_failures: usize,
}

pub const SCHEMA: &str = "chaosrun-history/1";

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The worst verdict among one run's attempts, and whether they disagreed.
fn run_outcome(attempts: &[&ScenarioRow]) -> (String, bool) {
    let has = |v: &str| attempts.iter().any(|a| a.verdict == v);
    let verdict = if has("error") {
        "error"
    } else if has("fail") {
        "fail"
    } else if has("pass") {
        "pass"
    } else {
        "n/a"
    };
    let judged: Vec<bool> = attempts
        .iter()
        .filter(|a| a.verdict != "n/a")
        .map(|a| a.verdict == "pass")
        .collect();
    let mixed = judged.iter().any(|p| *p) && judged.iter().any(|p| !*p);
    (verdict.to_string(), mixed)
}

/// The label of a sequence of judged outcomes (true = passed), oldest first.
pub fn label(passes: &[bool], mixed_within_a_run: bool) -> Label {
    let Some(&now) = passes.last() else {
        return Label::NotApplicable;
    };
    let changes = passes.windows(2).filter(|w| w[0] != w[1]).count();
    let changed_last = passes.len() >= 2 && passes[passes.len() - 2] != now;
    match (changes, changed_last, now) {
        _ if mixed_within_a_run || changes >= 2 => Label::Flaky,
        (1, true, false) => Label::NewFail,
        (1, true, true) => Label::Fixed,
        (_, _, false) => Label::Fail,
        (_, _, true) => Label::Pass,
    }
}

/// Analyse a window (pure).
pub fn summarize(w: &Window) -> Summary {
    let mut by_scenario: BTreeMap<&str, BTreeMap<i64, Vec<&ScenarioRow>>> = BTreeMap::new();
    for r in &w.rows {
        by_scenario
            .entry(&r.scenario)
            .or_default()
            .entry(r.run_id)
            .or_default()
            .push(r);
    }
    let mut scenarios: Vec<Trend> = by_scenario
        .into_iter()
        .map(|(id, per_run)| trend(id, &w.runs, &per_run))
        .collect();
    // Regressions first, then flakes and known failures; by id within a label.
    scenarios.sort_by_key(|t| (t.label as u8, t.id.clone()));
    Summary {
        schema: SCHEMA,
        new_failures: scenarios
            .iter()
            .filter(|t| t.label == Label::NewFail)
            .count(),
        runs: w
            .runs
            .iter()
            .map(|r: &RunRow| RunInfo {
                id: r.id,
                started_ms: r.started_ms,
                agent: r.agent.clone(),
                agent_version: r.agent_version.clone(),
                commit: r.commit.clone(),
                run_url: r.run_url.clone(),
            })
            .collect(),
        scenarios,
    }
}

fn trend(id: &str, runs: &[RunRow], per_run: &BTreeMap<i64, Vec<&ScenarioRow>>) -> Trend {
    let mut outcomes = Vec::with_capacity(runs.len());
    let mut judged: Vec<(i64, bool)> = Vec::new();
    let mut durations = Vec::new();
    let mut mixed = false;
    let mut failing = Vec::new();
    let mut latest = String::from("n/a");
    for run in runs {
        let Some(attempts) = per_run.get(&run.id) else {
            outcomes.push(Outcome {
                run: run.id,
                verdict: None,
                seconds: None,
            });
            continue;
        };
        let (verdict, m) = run_outcome(attempts);
        mixed |= m;
        let secs = median(&mut attempts.iter().map(|a| a.seconds).collect::<Vec<_>>());
        if verdict != "n/a" {
            judged.push((run.id, verdict == "pass"));
            durations.extend(secs);
        }
        failing = attempts.iter().flat_map(|a| a.failing.clone()).collect();
        latest = verdict.clone();
        outcomes.push(Outcome {
            run: run.id,
            verdict: Some(verdict),
            seconds: secs,
        });
    }
    let passes: Vec<bool> = judged.iter().map(|(_, p)| *p).collect();
    let passed = passes.iter().filter(|p| **p).count();
    let changed_in = judged
        .windows(2)
        .rev()
        .find(|w| w[0].1 != w[1].1)
        .map(|w| w[1].0);
    let n = durations.len();
    let recent = median(&mut durations[n.saturating_sub(TREND_RUNS)..].to_vec());
    let before_start = n.saturating_sub(2 * TREND_RUNS);
    let before_end = n.saturating_sub(TREND_RUNS);
    let before = median(&mut durations[before_start..before_end].to_vec());
    let enough = n >= 4;
    let duration_trend = match (recent, before) {
        (Some(r), Some(b)) if enough && b > 0.0 => Some(r / b - 1.0),
        _ => None,
    };
    Trend {
        id: id.to_string(),
        label: label(&passes, mixed),
        runs: passes.len(),
        passed,
        pass_rate: (!passes.is_empty()).then(|| passed as f64 / passes.len() as f64),
        latest,
        changed_in,
        recent_seconds: recent,
        duration_trend,
        outcomes,
        failing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(seq: &str) -> Label {
        let p: Vec<bool> = seq.chars().map(|c| c == 'P').collect();
        label(&p, false)
    }

    #[test]
    fn labels_of_scripted_sequences() {
        assert_eq!(labels("PPF"), Label::NewFail);
        assert_eq!(labels("F"), Label::Fail);
        assert_eq!(labels("PPFF"), Label::Fail);
        assert_eq!(labels("FFP"), Label::Fixed);
        assert_eq!(labels("FFPP"), Label::Pass);
        assert_eq!(labels("PPFPF"), Label::Flaky);
        assert_eq!(labels("PFP"), Label::Flaky);
        assert_eq!(labels("PPPP"), Label::Pass);
        assert_eq!(labels(""), Label::NotApplicable);
        assert_eq!(label(&[true, true], true), Label::Flaky);
    }

    fn row(run_id: i64, scenario: &str, verdict: &str, seconds: f64) -> ScenarioRow {
        ScenarioRow {
            run_id,
            scenario: scenario.into(),
            attempt: 1,
            verdict: verdict.into(),
            seconds,
            main_calls: 1,
            failing: vec![],
            row_id: run_id * 100,
        }
    }

    #[test]
    fn summary_of_a_window() {
        let runs: Vec<RunRow> = (1..=12)
            .map(|id| RunRow {
                id,
                started_ms: id * 1000,
                agent: "a".into(),
                agent_version: None,
                commit: None,
                run_url: None,
            })
            .collect();
        let mut rows = Vec::new();
        for id in 1..=12 {
            rows.push(row(id, "slow", "pass", if id > 7 { 2.4 } else { 2.0 }));
            if id != 5 {
                rows.push(row(
                    id,
                    "regress",
                    if id == 12 { "error" } else { "pass" },
                    1.0,
                ));
            }
        }
        let s = summarize(&Window { runs, rows });
        assert_eq!(s.new_failures, 1);
        let regress = &s.scenarios[0];
        assert_eq!(
            (regress.id.as_str(), regress.label, regress.changed_in),
            ("regress", Label::NewFail, Some(12))
        );
        assert_eq!((regress.runs, regress.passed), (11, 10));
        assert_eq!(regress.outcomes[4].verdict, None);
        let slow = &s.scenarios[1];
        assert_eq!(slow.label, Label::Pass);
        assert!(
            (slow.duration_trend.unwrap() - 0.2).abs() < 1e-9,
            "{slow:?}"
        );
    }
}
