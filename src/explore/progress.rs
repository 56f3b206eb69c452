//! Explore's progress on stderr: one line per trial (its seed and outcome),
//! per confirmation and per kept shrinking step, and the closing tallies
//! (chaosrun's own CPU time against the wall; distinct, known, flaky and
//! unexercised findings; coverage cells). It only prints; it decides
//! nothing.

use std::time::Instant;

use super::coverage::Coverage;
use super::findings::Distinct;

/// Counts for the closing line.
pub struct Progress {
    started: Instant,
    pub trials: u64,
    pub failures: u64,
    pub confirmed: u64,
    pub flaky: u64,
    pub inconclusive: u64,
    /// Confirmed failures that `--known` names.
    pub known_hits: u64,
    pub runs: u64,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            started: Instant::now(),
            trials: 0,
            failures: 0,
            confirmed: 0,
            flaky: 0,
            inconclusive: 0,
            known_hits: 0,
            runs: 0,
        }
    }
}

/// chaosrun's own CPU seconds so far (user + system, children excluded).
pub fn self_cpu() -> f64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

impl Progress {
    pub fn header(&self, seed: u64, budget: u64, jobs: usize, agent: &str) {
        crate::say_err!(
            "explore: seed {seed}, budget {budget} s, {jobs} at once, agent {agent} (replay with --seed {seed})"
        );
    }

    pub fn trial(&mut self, n: u64, seed: u64, outcome: &str, secs: f64) {
        self.trials += 1;
        crate::say_err!(
            "explore: trial {n} seed {seed}: {outcome} ({secs:.1} s) [{} trials, {} failures]",
            self.trials,
            self.failures
        );
    }

    pub fn confirming(&self, n: u64, check: &str, k: u32) {
        crate::say_err!("explore: trial {n} failed {check}; re-running it {k} times");
    }

    pub fn shrink_step(&self, faults: usize, steps: usize, evals: usize) {
        crate::say_err!(
            "explore: shrinking: kept a smaller schedule ({faults} fault(s), {steps} step(s)) after {evals} candidate run(s)"
        );
    }

    pub fn line(&self, text: &str) {
        crate::say_err!("explore: {text}");
    }

    /// The closing tally of findings (each distinct new one with its hit
    /// count, known hits, flaky, not exercised) and the coverage.
    pub fn closing(&self, distinct: &Distinct, cov: &Coverage) {
        let mut text = format!(
            "tally: {} distinct new finding(s), {} known hit(s), {} flaky, {} not exercised",
            distinct.seen.len(),
            self.known_hits,
            self.flaky,
            self.inconclusive
        );
        for (sig, hits) in &distinct.seen {
            text.push_str(&format!("\n  new: {sig} (hit by {hits} trial(s))"));
        }
        crate::say_err!("explore: {text}");
        crate::say_err!("explore: {}", cov.tally());
    }

    /// The closing tally; returns (wall seconds, chaosrun CPU seconds).
    pub fn finish(&self) -> (f64, f64) {
        let wall = self.started.elapsed().as_secs_f64();
        let cpu = self_cpu();
        crate::say_err!(
            "explore: {} trials ({} runs in all), {} failure(s): {} confirmed, {} flaky, {} not exercised; wall {wall:.1} s; chaosrun cpu {cpu:.2} s ({:.2}% of wall, {:.3} s per run)",
            self.trials,
            self.runs,
            self.failures,
            self.confirmed,
            self.flaky,
            self.inconclusive,
            100.0 * cpu / wall.max(1e-9),
            cpu / (self.runs.max(1) as f64),
        );
        (wall, cpu)
    }
}
