//! The explore loop: healthy warm-up trials calibrate the deadlines
//! ([`super::calibrate`]); then trials in waves (of `jobs`, growing to 3 ×
//! `jobs`), each the least-tried of a few candidates ([`super::coverage`]),
//! until the budget (or `--trials`) is spent; a failed trial re-run `confirm`
//! times (every run failing the same check confirms it, else it is reported
//! as a flake with its rate and not shrunk); a confirmed one shrunk with
//! candidate rows run in parallel, verified (it fails alone; the script
//! without its faults passes) and printed once per signature, unless
//! `--known` names it ([`super::findings`]). Each wave is an ordinary
//! `runner::run_all` over rows loaded through the table loader, so a trial is
//! judged exactly as a table row is. SIGINT/SIGTERM stop it (130/143) with
//! the findings so far.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::calibrate::Calibration;
use super::config::Config;
use super::coverage::Coverage;
use super::emit::Finding;
use super::findings::{Distinct, Known};
use super::generate::Trial;
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
    /// Failures already known (`--known`).
    pub known: Known,
    /// `--deadline-scale`, on top of the calibrated deadlines.
    pub deadline_scale: f64,
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
    /// The failed check a finding is about (see [`finding`]).
    Fail(String),
    /// Only `exercised` failed: the schedule did not land; it proves nothing.
    NotExercised(String),
    Error(String),
}

fn judge(r: &ScenarioResult) -> Judged {
    match &r.verdict {
        Verdict::Pass => return Judged::Pass,
        Verdict::Error { cause } => return Judged::Error(cause.to_string()),
        Verdict::NotApplicable { reason } => return Judged::Error(reason.to_string()),
        Verdict::Fail => {}
    }
    let id = |c: &crate::oracle::Check| format!("{} / {}", c.invariant.label(), c.name);
    let failed: Vec<&Check> = r.failures().collect();
    match finding(&failed) {
        Some(c) => Judged::Fail(id(c)),
        None => Judged::NotExercised(
            r.failures()
                .flat_map(|c| c.violations().iter().cloned())
                .next()
                .unwrap_or_default(),
        ),
    }
}

/// The failed check a finding is about: a wrong give-up if there is one (the
/// turn's `outcome` then fails too, less precisely), else the first that is
/// not `exercised`.
/// A kill that never landed fails both `exercised / process_fault_landed` and
/// `termination / kill_landed_mid_turn`; the latter then says only that the
/// fault did not land (the turn ended first, e.g. on retries the profile did
/// not give it), so it is not a finding either.
fn finding<'c>(failed: &[&'c Check]) -> Option<&'c Check> {
    let kill_missed = failed
        .iter()
        .any(|c| c.invariant == Invariant::Exercised && c.name == "process_fault_landed");
    let mut real = failed
        .iter()
        .copied()
        .filter(|c| c.invariant != Invariant::Exercised)
        .filter(|c| !(kill_missed && c.name == "kill_landed_mid_turn"));
    let first = real.next()?;
    Some(
        std::iter::once(first)
            .chain(real)
            .find(|c| c.name == "gave_up_with_retries_left")
            .unwrap_or(first),
    )
}

/// The check id of a wrong give-up.
const GAVE_UP: &str = "bounded termination / gave_up_with_retries_left";

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
    /// The deadlines every row gets, once calibrated.
    cal: Option<Calibration>,
}

impl Runner<'_> {
    /// Run each trial `repeat` times (at most `jobs` at once); results in
    /// order (trial-major). Err(code) on SIGINT/SIGTERM.
    fn run(&mut self, trials: &[Trial], repeat: u32) -> Result<Vec<Arc<ScenarioResult>>, u8> {
        let scenarios: Vec<_> = trials
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let row = schedule::row(t, &format!("trial_{i}"), self.cal.as_ref());
                let text = schedule::table_text("", &[row]);
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
    let mut s = Search {
        plan,
        r: Runner {
            rt,
            shared,
            seed: plan.seed,
            jobs: plan.jobs,
            calls: 0,
            cal: None,
        },
        p: Progress::default(),
        started: Instant::now(),
        cov: Coverage::default(),
        distinct: Distinct::default(),
        findings: Vec::new(),
    };
    s.p.header(plan.seed, plan.budget.as_secs(), plan.jobs, &plan.agent);
    if !plan.known.is_empty() {
        s.p.line(&format!(
            "known: {} check(s) from a report, {} signature(s) from a table",
            plan.known.checks.len(),
            plan.known.signatures.len()
        ));
    }
    let res = s.calibrate().and_then(|()| s.search());
    s.p.finish();
    s.p.closing(&s.distinct, &s.cov);
    match res {
        Ok(()) => Outcome::Done(s.findings),
        Err(code) => Outcome::Interrupted(code, s.findings),
    }
}

/// One search's state.
struct Search<'a> {
    plan: &'a Plan,
    r: Runner<'a>,
    p: Progress,
    started: Instant,
    cov: Coverage,
    distinct: Distinct,
    findings: Vec<Finding>,
}

/// What handling a trial's result says to do next.
enum Next {
    Go,
    Stop,
}

impl Search<'_> {
    /// Run the warm-up trials and set the deadlines; without a calibration
    /// (the agent failed a healthy trial) the defaults stay, said so.
    fn calibrate(&mut self) -> Result<(), u8> {
        let n = self.plan.jobs.clamp(2, 4);
        let warm = Calibration::warmup_trial(&self.plan.cfg);
        let rs = self
            .r
            .run(&vec![warm.clone(); n], 1)
            .map_err(|c| self.interrupted(c))?;
        self.p.runs += rs.len() as u64;
        match Calibration::measure(&rs, &warm, self.plan.deadline_scale) {
            Ok(c) => {
                self.p.line(&c.describe(rs.len()));
                self.r.cal = Some(c);
            }
            Err(e) => self.p.line(&format!(
                "not calibrated ({e}); every trial keeps the default deadlines (turn 90 s)"
            )),
        }
        Ok(())
    }

    fn interrupted(&self, code: u8) -> u8 {
        self.p.line("interrupted; stopping");
        code
    }

    fn search(&mut self) -> Result<(), u8> {
        let plan = self.plan;
        let mut n: u64 = 0;
        let mut waves: u64 = 0;
        while self.started.elapsed() < plan.budget && plan.max_trials.is_none_or(|m| n < m) {
            // Waves grow from `jobs` trials to 3 × `jobs` (run_all keeps `jobs`
            // busy within a wave, so a slow trial holds back less of the next).
            waves += 1;
            let size = plan.jobs as u64 * waves.min(3);
            let wave = plan.max_trials.map_or(size, |m| (m - n).min(size));
            let trials: Vec<(u64, Trial)> = (n..n + wave)
                .map(|i| {
                    let t = self.cov.choose(plan.seed, i, &plan.cfg, plan.resume);
                    (i, t)
                })
                .collect();
            n += wave;
            let batch: Vec<Trial> = trials.iter().map(|(_, t)| t.clone()).collect();
            let results = self.r.run(&batch, 1).map_err(|c| self.interrupted(c))?;
            self.p.runs += results.len() as u64;
            for ((no, trial), res) in trials.into_iter().zip(results) {
                if let Next::Stop = self.judge_trial(no, trial, &res, n)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn judge_trial(
        &mut self,
        no: u64,
        trial: Trial,
        res: &ScenarioResult,
        started: u64,
    ) -> Result<Next, u8> {
        let check = match judge(res) {
            Judged::Pass => {
                self.p.trial(no, trial.seed, "pass", res.seconds);
                return Ok(Next::Go);
            }
            Judged::Error(e) => {
                let what = format!("ERROR (not a finding): {e}");
                self.p.trial(no, trial.seed, &what, res.seconds);
                return Ok(Next::Go);
            }
            Judged::NotExercised(v) => {
                self.p.inconclusive += 1;
                let what = format!("fault not exercised (not a finding): {v}");
                self.p.trial(no, trial.seed, &what, res.seconds);
                return Ok(Next::Go);
            }
            Judged::Fail(check) => check,
        };
        self.p.failures += 1;
        self.p
            .trial(no, trial.seed, &format!("FAIL {check}"), res.seconds);
        self.p.line(&format!(
            "failure found {:.1} s into the search, in trial {no} ({started} trials started)",
            self.started.elapsed().as_secs_f64()
        ));
        self.on_failure(no, trial, check)
    }

    /// Confirm, shrink, verify and report one failure.
    fn on_failure(&mut self, no: u64, trial: Trial, check: String) -> Result<Next, u8> {
        let plan = self.plan;
        self.p.confirming(no, &check, plan.confirm);
        let failed = self.failing(&trial, &check, plan.confirm)?;
        if failed < plan.confirm {
            self.p.flaky += 1;
            self.p.line(&format!(
                "trial {no} seed {}: FLAKY {check}: failed {failed} of {} re-runs ({:.0}%); not shrunk",
                trial.seed,
                plan.confirm,
                100.0 * f64::from(failed) / f64::from(plan.confirm)
            ));
            return Ok(Next::Go);
        }
        self.p.confirmed += 1;
        if plan.known.checks.contains(&check) {
            // A report names checks, not schedules: no need to shrink.
            self.p.known_hits += 1;
            self.p.line(&format!(
                "trial {no}: confirmed {failed}/{}; KNOWN: {check} failed in the --known report; not shrunk",
                plan.confirm
            ));
            return Ok(Next::Go);
        }
        self.p.line(&format!(
            "trial {no}: confirmed {failed}/{} {:.1} s into the search; shrinking",
            plan.confirm,
            self.started.elapsed().as_secs_f64()
        ));
        let minimal = self.shrink(trial.clone(), &check)?;
        self.report(no, trial, minimal, check)
    }

    /// How many of `k` runs of `t` fail `check`.
    fn failing(&mut self, t: &Trial, check: &str, k: u32) -> Result<u32, u8> {
        let rs = self
            .r
            .run(std::slice::from_ref(t), k)
            .map_err(|c| self.interrupted(c))?;
        self.p.runs += rs.len() as u64;
        Ok(rs.iter().filter(|x| fails_check(x, check)).count() as u32)
    }

    fn shrink(&mut self, trial: Trial, check: &str) -> Result<Trial, u8> {
        let mut interrupted = None;
        let mut shrink_runs = 0u64;
        let (r, p) = (&mut self.r, &self.p);
        let shrunk = shrink::shrink(
            trial,
            self.plan.jobs,
            |cands| {
                if interrupted.is_some() {
                    return vec![false; cands.len()];
                }
                match r.run(cands, 1) {
                    Ok(rs) => {
                        shrink_runs += rs.len() as u64;
                        rs.iter().map(|x| fails_check(x, check)).collect()
                    }
                    Err(code) => {
                        interrupted = Some(code);
                        vec![false; cands.len()]
                    }
                }
            },
            |t, evals| p.shrink_step(t.fault_count(), t.steps.len(), evals),
        );
        self.p.runs += shrink_runs;
        if let Some(code) = interrupted {
            return Err(self.interrupted(code));
        }
        self.p.line(&format!(
            "shrunk in {} step(s), {} candidate run(s), {:.1} s into the search",
            shrunk.steps,
            shrunk.evals,
            self.started.elapsed().as_secs_f64()
        ));
        Ok(shrunk.trial)
    }

    /// Run `t` alone `confirm` times; the check it fails (a wrong give-up
    /// named precisely when every run shows it), how many runs failed it, and
    /// the violations of one that did.
    fn verify(&mut self, t: &Trial, check: String) -> Result<(String, u32, Vec<String>), u8> {
        let last = self
            .r
            .run(std::slice::from_ref(t), self.plan.confirm)
            .map_err(|c| self.interrupted(c))?;
        self.p.runs += last.len() as u64;
        // A wrong give-up also fails `outcome`; a schedule shrunk on that
        // check may now show the precise one on every run: name that.
        let check = match GAVE_UP {
            g if check != g && !last.is_empty() && last.iter().all(|x| fails_check(x, g)) => {
                g.to_string()
            }
            _ => check,
        };
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
        Ok((check, reproduced, violations))
    }

    /// Verify the shrunk row (it fails alone `confirm` times; the script
    /// without its faults passes), then print it unless it is known or
    /// already reported. A shrunk row that does not fail every time falls
    /// back to the confirmed original; if that does not either, the failure
    /// is flaky and not a finding.
    fn report(&mut self, no: u64, trial: Trial, minimal: Trial, check: String) -> Result<Next, u8> {
        let plan = self.plan;
        let mut minimal = minimal;
        let (mut found, mut reproduced, mut violations) = self.verify(&minimal, check.clone())?;
        if reproduced < plan.confirm && minimal != trial {
            self.p.line(&format!(
                "trial {no}: the shrunk row failed {reproduced}/{} alone; verifying the original schedule",
                plan.confirm
            ));
            minimal = trial.clone();
            (found, reproduced, violations) = self.verify(&minimal, check)?;
        }
        if reproduced < plan.confirm {
            self.p.flaky += 1;
            self.p.line(&format!(
                "trial {no}: FLAKY: the row failed {found} only {reproduced}/{} alone; not reported",
                plan.confirm
            ));
            return Ok(Next::Go);
        }
        let check = found;
        let healthy = self.healthy(&minimal)?;
        let f = Finding {
            run_seed: plan.seed,
            trial_no: no,
            original: trial,
            minimal,
            check,
            violations,
            reproduced,
            confirm: plan.confirm,
            cal: self.r.cal.clone(),
            healthy,
        };
        let sig = f.signature();
        if let Some(why) = plan.known.matches(&sig) {
            self.p.known_hits += 1;
            self.p
                .line(&format!("trial {no}: KNOWN ({why}); not reported"));
            return Ok(Next::Go);
        }
        if !self.distinct.hit(&sig) {
            self.p.line(&format!(
                "trial {no}: the same finding again ({sig}); counted, not reported"
            ));
            return Ok(Next::Go);
        }
        let mut out = std::io::stdout().lock();
        let rendered = crate::redact::text(&f.render()).to_string();
        let shown = crate::term::escape(&rendered);
        let _ = std::io::Write::write_all(&mut out, shown.as_bytes());
        let _ = std::io::Write::flush(&mut out);
        self.findings.push(f);
        Ok(if plan.keep_going {
            Next::Go
        } else {
            Next::Stop
        })
    }

    /// Run the same script without its faults once: `Ok` when it passes.
    fn healthy(&mut self, t: &Trial) -> Result<Result<(), String>, u8> {
        let clean = t.without_faults();
        let rs = self
            .r
            .run(std::slice::from_ref(&clean), 1)
            .map_err(|c| self.interrupted(c))?;
        self.p.runs += rs.len() as u64;
        Ok(match rs.first().map(|r| judge(r)) {
            Some(Judged::Pass) => Ok(()),
            Some(Judged::Fail(c)) => Err(c),
            Some(Judged::NotExercised(v)) | Some(Judged::Error(v)) => Err(v),
            None => Err("it did not run".into()),
        })
    }
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
