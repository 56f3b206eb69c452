//! The explore loop: trials in waves (of `jobs`, growing to 3 × `jobs`)
//! until the budget (or `--trials`) is spent; a failed trial re-run
//! `confirm` times (every run failing the same check confirms it, else it is
//! reported as a flake with its rate and not shrunk); a confirmed one shrunk
//! with candidate rows run in parallel, then printed. Each wave is an
//! ordinary `runner::run_all` over rows loaded through the table loader, so a
//! trial is judged exactly as a table row is. SIGINT/SIGTERM stop it
//! (130/143) with the findings so far.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::config::Config;
use super::emit::Finding;
use super::generate::{generate, trial_seed, Trial};
use super::progress::Progress;
use super::{schedule, shrink};
use crate::oracle::{Check, Invariant};
use crate::runner::{self, ScenarioResult, Shared, Verdict};

/// What the search does.
pub struct Plan {
    pub seed: u64,
    pub budget: Duration,
    pub jobs: usize,
    pub max_trials: Option<u64>,
    pub confirm: u32,
    pub keep_going: bool,
    pub resume: bool,
    pub cfg: Config,
    pub agent: String,
}

/// How the search ended.
pub enum Outcome {
    Done(Vec<Finding>),
    /// Stopped by a signal: the exit code (130/143) and what was found.
    Interrupted(u8, Vec<Finding>),
}

/// A run's result as explore reads it.
enum Judged {
    Pass,
    /// The first failed check that is not `exercised`, and its violations.
    Fail(String, Vec<String>),
    /// Only `exercised` failed: the schedule did not land; it proves nothing.
    NotExercised(String),
    Error(String),
}

fn judge(r: &ScenarioResult) -> Judged {
    match &r.verdict {
        Verdict::Pass => return Judged::Pass,
        Verdict::Error { cause } => return Judged::Error(cause.clone()),
        Verdict::NotApplicable { reason } => return Judged::Error(reason.clone()),
        Verdict::Fail => {}
    }
    let id = |c: &crate::oracle::Check| format!("{} / {}", c.invariant.label(), c.name);
    let failed: Vec<&Check> = r.failures().collect();
    match finding(&failed) {
        Some(c) => Judged::Fail(id(c), c.violations().to_vec()),
        None => Judged::NotExercised(
            r.failures()
                .flat_map(|c| c.violations().iter().cloned())
                .next()
                .unwrap_or_default(),
        ),
    }
}

/// The failed check a finding is about: the first that is not `exercised`.
/// A kill that never landed fails both `exercised / process_fault_landed` and
/// `termination / kill_landed_mid_turn`; the latter then says only that the
/// fault did not land (the turn ended first, e.g. on retries the profile did
/// not give it), so it is not a finding either.
fn finding<'c>(failed: &[&'c Check]) -> Option<&'c Check> {
    let kill_missed = failed
        .iter()
        .any(|c| c.invariant == Invariant::Exercised && c.name == "process_fault_landed");
    failed
        .iter()
        .copied()
        .filter(|c| c.invariant != Invariant::Exercised)
        .find(|c| !(kill_missed && c.name == "kill_landed_mid_turn"))
}

/// Whether `r` failed the check `check`.
fn fails_check(r: &ScenarioResult, check: &str) -> bool {
    r.failures()
        .any(|c| format!("{} / {}", c.invariant.label(), c.name) == check)
}

/// Runs rows; stops at a signal.
struct Runner<'a> {
    rt: &'a tokio::runtime::Runtime,
    shared: Arc<Shared>,
    seed: u64,
    jobs: usize,
    calls: u64,
}

impl Runner<'_> {
    /// Run each trial `repeat` times (at most `jobs` at once); results in
    /// order (trial-major). Err(code) on SIGINT/SIGTERM.
    fn run(&mut self, trials: &[Trial], repeat: u32) -> Result<Vec<Arc<ScenarioResult>>, u8> {
        let scenarios: Vec<_> = trials
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let text = schedule::table_text("", &[schedule::row(t, &format!("trial_{i}"))]);
                let mut table = crate::scenarios::load_str(&text, "<explore trial>")
                    .unwrap_or_else(|e| panic!("a generated row must load: {e}\n{text}"));
                table.scenarios.remove(0)
            })
            .collect();
        self.calls += 1;
        let opts = runner::Options {
            jobs: self.jobs,
            artifacts: None,
            keep_all: false,
            seed: self.seed ^ self.calls,
            repeat,
        };
        let shared = self.shared.clone();
        self.rt.block_on(async move {
            let (tx, rx) = mpsc::unbounded_channel();
            drop(rx);
            let mut sigint =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                    .expect("signal");
            let mut sigterm =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("signal");
            tokio::select! {
                r = runner::run_all(shared, scenarios, opts, tx) => Ok(r),
                _ = sigint.recv() => Err(130),
                _ = sigterm.recv() => Err(143),
            }
        })
    }
}

/// Search as `plan` says.
pub fn run(rt: &tokio::runtime::Runtime, shared: Arc<Shared>, plan: &Plan) -> Outcome {
    let mut p = Progress::default();
    p.header(plan.seed, plan.budget.as_secs(), plan.jobs, &plan.agent);
    let mut r = Runner {
        rt,
        shared,
        seed: plan.seed,
        jobs: plan.jobs,
        calls: 0,
    };
    let started = Instant::now();
    let mut findings = Vec::new();
    let mut n: u64 = 0;
    let mut waves: u64 = 0;
    let stop = |code, p: &Progress, f| {
        p.line("interrupted; stopping");
        p.finish();
        Outcome::Interrupted(code, f)
    };
    'search: while started.elapsed() < plan.budget && plan.max_trials.is_none_or(|m| n < m) {
        // Waves grow from `jobs` trials to 3 × `jobs` (run_all keeps `jobs`
        // busy within a wave, so a slow trial holds back less of the next).
        waves += 1;
        let size = plan.jobs as u64 * waves.min(3);
        let wave = plan.max_trials.map_or(size, |m| (m - n).min(size));
        let trials: Vec<(u64, Trial)> = (n..n + wave)
            .map(|i| {
                (
                    i,
                    generate(trial_seed(plan.seed, i), &plan.cfg, plan.resume),
                )
            })
            .collect();
        n += wave;
        let batch: Vec<Trial> = trials.iter().map(|(_, t)| t.clone()).collect();
        let results = match r.run(&batch, 1) {
            Ok(x) => x,
            Err(code) => return stop(code, &p, findings),
        };
        p.runs += results.len() as u64;
        for ((no, trial), res) in trials.into_iter().zip(results) {
            let (check, _) = match judge(&res) {
                Judged::Pass => {
                    p.trial(no, trial.seed, "pass", res.seconds);
                    continue;
                }
                Judged::Error(e) => {
                    p.trial(
                        no,
                        trial.seed,
                        &format!("ERROR (not a finding): {e}"),
                        res.seconds,
                    );
                    continue;
                }
                Judged::NotExercised(v) => {
                    p.inconclusive += 1;
                    p.trial(
                        no,
                        trial.seed,
                        &format!("fault not exercised (not a finding): {v}"),
                        res.seconds,
                    );
                    continue;
                }
                Judged::Fail(check, v) => (check, v),
            };
            p.failures += 1;
            p.trial(no, trial.seed, &format!("FAIL {check}"), res.seconds);
            p.line(&format!(
                "failure found {:.1} s into the search, in trial {no} ({n} trials started)",
                started.elapsed().as_secs_f64()
            ));
            p.confirming(no, &check, plan.confirm);
            let again = match r.run(std::slice::from_ref(&trial), plan.confirm) {
                Ok(x) => x,
                Err(code) => return stop(code, &p, findings),
            };
            p.runs += again.len() as u64;
            let failed = again.iter().filter(|x| fails_check(x, &check)).count() as u32;
            if failed < plan.confirm {
                p.flaky += 1;
                p.line(&format!(
                    "trial {no} seed {}: FLAKY {check}: failed {failed} of {} re-runs ({:.0}%); not shrunk",
                    trial.seed,
                    plan.confirm,
                    100.0 * f64::from(failed) / f64::from(plan.confirm)
                ));
                continue;
            }
            p.confirmed += 1;
            p.line(&format!(
                "trial {no}: confirmed {}/{}; shrinking",
                failed, plan.confirm
            ));
            let mut interrupted = None;
            let mut shrink_runs = 0u64;
            let shrunk = shrink::shrink(
                trial.clone(),
                plan.jobs,
                |cands| {
                    if interrupted.is_some() {
                        return vec![false; cands.len()];
                    }
                    match r.run(cands, 1) {
                        Ok(rs) => {
                            shrink_runs += rs.len() as u64;
                            rs.iter().map(|x| fails_check(x, &check)).collect()
                        }
                        Err(code) => {
                            interrupted = Some(code);
                            vec![false; cands.len()]
                        }
                    }
                },
                |t, evals| p.shrink_step(t.fault_count(), t.steps.len(), evals),
            );
            p.runs += shrink_runs;
            if let Some(code) = interrupted {
                return stop(code, &p, findings);
            }
            let last = match r.run(std::slice::from_ref(&shrunk.trial), plan.confirm) {
                Ok(x) => x,
                Err(code) => return stop(code, &p, findings),
            };
            p.runs += last.len() as u64;
            let reproduced = last.iter().filter(|x| fails_check(x, &check)).count() as u32;
            let violations = last
                .iter()
                .find(|x| fails_check(x, &check))
                .and_then(|x| {
                    x.failures()
                        .find(|c| format!("{} / {}", c.invariant.label(), c.name) == check)
                        .map(|c| c.violations().to_vec())
                })
                .unwrap_or_default();
            let f = Finding {
                run_seed: plan.seed,
                trial_no: no,
                original: trial,
                minimal: shrunk.trial,
                check,
                violations,
                reproduced,
                confirm: plan.confirm,
            };
            p.line(&format!(
                "shrunk in {} step(s), {} candidate run(s)",
                shrunk.steps, shrunk.evals
            ));
            let mut out = std::io::stdout().lock();
            let text = f.render();
            let _ = std::io::Write::write_all(&mut out, crate::term::escape(&crate::redact::text(&text)).as_bytes());
            let _ = std::io::Write::flush(&mut out);
            findings.push(f);
            if !plan.keep_going {
                break 'search;
            }
        }
    }
    p.finish();
    Outcome::Done(findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(inv: Invariant, name: &'static str) -> Check {
        Check::new(inv, name, vec!["x".into()])
    }

    #[test]
    fn a_kill_that_never_landed_is_not_a_finding() {
        let landed = fail(Invariant::Exercised, "process_fault_landed");
        let mid = fail(Invariant::Termination, "kill_landed_mid_turn");
        assert!(finding(&[&mid, &landed]).is_none());
        // Another failure beside it still is one.
        let hyg = fail(Invariant::ProcessHygiene, "no_survivors");
        assert_eq!(
            finding(&[&mid, &landed, &hyg]).unwrap().name,
            "no_survivors"
        );
        // A kill that landed but after the turn returned, with the fault counted
        // as landed, stays a finding.
        assert_eq!(finding(&[&mid]).unwrap().name, "kill_landed_mid_turn");
    }
}
