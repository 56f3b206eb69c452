//! Calibrated deadlines: before searching, explore runs a few healthy trials
//! (the longest script, no fault) and measures the agent's slowest turn and
//! boot, and from the turn its own time per model call (the turn less the
//! script's tool time, per call); every trial's deadlines are then a
//! documented function of those and of the trial's own script and faults
//! ([`Calibration::deadlines`]), so a hang is confirmed and shrunk in seconds
//! rather than at the table's 90 s default.
//! Pure except for [`Calibration::measure`], which reads finished runs.

use crate::observe::Event;
use crate::runner::ScenarioResult;
use crate::scenarios::Knobs;

use super::config::Config;
use super::generate::{Action, FaultKind, Step, Trial, PERSIST_RETRIES};

/// No calibrated deadline is below this many seconds.
pub const FLOOR_SECS: f64 = 10.0;
/// The healthy figure is multiplied by this.
pub const MARGIN: f64 = 3.0;
/// Allowed per faulted call on top of what the fault itself holds the agent
/// for: the agent's backoff before its retry (capped exponential backoff
/// rarely waits longer).
pub const BACKOFF_ALLOWANCE: f64 = 2.0;

/// What the healthy trials measured, and `--deadline-scale`.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// The slowest healthy faulted turn, `turn_start` to `turn_end`, seconds.
    pub turn: f64,
    /// The agent's own seconds per model call in that turn: (turn − the
    /// script's tool time, a parallel batch counted once) / its calls.
    pub per_call: f64,
    /// The slowest healthy boot, spawn to `ready`, seconds.
    pub boot: f64,
    pub scale: f64,
}

/// The deadlines a trial's row gets (the other phases keep the defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrialDeadlines {
    pub boot: f64,
    pub turn: f64,
    pub probe: f64,
}

/// Seconds one faulted call holds the agent before it sees the fault (at the
/// row's knobs), plus [`BACKOFF_ALLOWANCE`]; a 429 adds its `retry_after` (1 s).
pub fn fault_allowance(k: FaultKind) -> f64 {
    let knobs = Knobs::default();
    let item = k.item();
    let wait = match (item.waits(), item.mid_stream()) {
        (true, false) => knobs.request_timeout,
        (true, true) => knobs.stale_timeout,
        (false, _) => item.retry_after() as f64,
    };
    wait + BACKOFF_ALLOWANCE
}

/// Seconds up to 0.5 s above `v` (so a printed row stays readable).
fn round_up(v: f64) -> f64 {
    (v * 2.0).ceil() / 2.0
}

impl Calibration {
    /// The deadlines of `t`, each × `scale`:
    ///
    /// - turn  = max(FLOOR, MARGIN × (per_call × the trial's calls + its
    ///   tool seconds, every call of a batch counted + 4 × its answer's chunk
    ///   gap) + Σ over its faulted calls of [`fault_allowance`] + its stop's
    ///   seconds)
    /// - boot  = max(FLOOR, MARGIN × slowest healthy boot)
    /// - probe = max(FLOOR, MARGIN × (slowest healthy turn + boot)) (a
    ///   killed agent boots again before it answers the probe)
    ///
    /// A persistent fault counts its calls; one that never clears counts
    /// the row's retries + 1.
    pub fn deadlines(&self, t: &Trial) -> TrialDeadlines {
        let mut faults = 0.0;
        let mut stop = 0.0;
        let mut work = 0.0;
        for s in &t.steps {
            faults += s
                .faults
                .iter()
                .map(|f| fault_allowance(f.kind))
                .sum::<f64>();
            if let Some(p) = s.persist {
                let retries = u64::from(PERSIST_RETRIES);
                let n = p.calls.map_or(retries + 1, u64::from);
                faults += n as f64 * fault_allowance(p.kind);
            }
            stop += s.stop_for.unwrap_or(0.0);
            work += self.per_call
                + match &s.action {
                    Action::Tools { secs } => secs.iter().sum::<f64>(),
                    Action::Final { gap } => 4.0 * gap,
                    Action::Background => 0.0,
                };
        }
        let turn = (MARGIN * work + faults + stop).max(FLOOR_SECS);
        let boot = (MARGIN * self.boot).max(FLOOR_SECS);
        let probe = (MARGIN * (self.turn + self.boot)).max(FLOOR_SECS);
        TrialDeadlines {
            boot: round_up(boot * self.scale),
            turn: round_up(turn * self.scale),
            probe: round_up(probe * self.scale),
        }
    }

    /// The healthy trial the calibration runs: the longest script the config
    /// allows (its most steps, each a tool call of the longest drawn run
    /// time, a parallel batch when the config has them), no fault.
    pub fn warmup_trial(c: &Config) -> Trial {
        let longest = c.delay.p99 * 2.0;
        let mut steps: Vec<Step> = (0..c.steps[1].max(1))
            .map(|i| Step {
                action: Action::Tools {
                    secs: if i % 2 == 1 && c.parallel_share > 0.0 {
                        vec![longest; c.max_parallel as usize]
                    } else {
                        vec![longest]
                    },
                },
                ..Step::answer(0.0)
            })
            .collect();
        steps.push(Step::answer(0.125));
        Trial { seed: 0, steps }
    }

    /// The calibration from the healthy runs `rs`, or why there is none (a
    /// run that did not pass: the agent is not healthy without faults, and
    /// explore then keeps the default deadlines).
    pub fn measure(
        rs: &[std::sync::Arc<ScenarioResult>],
        warm: &Trial,
        scale: f64,
    ) -> Result<Self, String> {
        let (mut turn, mut boot) = (0.0f64, 0.0f64);
        for r in rs {
            if !r.passed() {
                let why = r
                    .failures()
                    .flat_map(|c| c.violations().iter())
                    .next()
                    .cloned()
                    .unwrap_or_else(|| r.verdict.name().to_string());
                return Err(format!("a healthy warm-up trial did not pass: {why}"));
            }
            let o = &r.observation;
            let (Some(start), Some((end, _))) = (o.turn_start(0), o.turn_end(0)) else {
                return Err("a warm-up trial has no faulted-turn start or end".into());
            };
            turn = turn.max(end - start);
            let spawned = o.find(|e| matches!(e, Event::Spawned { .. }).then_some(()));
            let ready = o.find(|e| matches!(e, Event::Ready).then_some(()));
            if let (Some((s, _)), Some((r, _))) = (spawned, ready) {
                boot = boot.max(r - s);
            }
        }
        if rs.is_empty() {
            return Err("no warm-up trial ran".into());
        }
        let tools: f64 = warm
            .steps
            .iter()
            .map(|s| match &s.action {
                Action::Tools { secs } => secs.iter().copied().fold(0.0, f64::max),
                _ => 0.0,
            })
            .sum();
        let per_call = ((turn - tools) / warm.steps.len().max(1) as f64).max(0.0);
        Ok(Calibration {
            turn,
            per_call,
            boot,
            scale,
        })
    }

    /// The line explore prints at its start.
    pub fn describe(&self, runs: usize) -> String {
        let example = self.deadlines(&Trial {
            seed: 0,
            steps: vec![Step::answer(0.0)],
        });
        format!(
            "calibrated on {runs} healthy trial(s): slowest turn {:.2} s ({:.2} s per model call besides tools), slowest boot {:.2} s; \
             each trial's deadlines: turn = max({FLOOR_SECS}, {MARGIN} × ({:.2} × calls + tool seconds) + Σ per faulted call (its timeout + {BACKOFF_ALLOWANCE} s) + stop), \
             boot {} s, probe {} s{}",
            self.turn,
            self.per_call,
            self.boot,
            self.per_call,
            example.boot,
            example.probe,
            if self.scale == 1.0 {
                String::new()
            } else {
                format!(", all × {} (--deadline-scale)", self.scale)
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::generate::{Fault, Persist};
    use super::*;

    fn cal() -> Calibration {
        Calibration {
            turn: 2.0,
            per_call: 2.0,
            boot: 0.5,
            scale: 1.0,
        }
    }

    #[test]
    fn a_healthy_trial_gets_the_floor_or_three_times_the_slowest_turn() {
        let t = Trial {
            seed: 1,
            steps: vec![Step::answer(0.0)],
        };
        let d = cal().deadlines(&t);
        assert_eq!(d.turn, 10.0);
        assert_eq!(d.boot, 10.0);
        let slow = Calibration {
            turn: 7.0,
            per_call: 7.0,
            boot: 4.0,
            scale: 1.0,
        };
        let d = slow.deadlines(&t);
        assert_eq!((d.turn, d.boot, d.probe), (21.0, 12.0, 33.0));
        // A longer script gets its calls and its tool time.
        let mut long = t.clone();
        long.steps.insert(
            0,
            Step {
                action: Action::Tools {
                    secs: vec![1.0, 1.0],
                },
                ..Step::answer(0.0)
            },
        );
        assert_eq!(slow.deadlines(&long).turn, 3.0 * (7.0 + 2.0 + 7.0));
    }

    #[test]
    fn each_faulted_call_adds_its_timeout_and_a_backoff() {
        let mut t = Trial {
            seed: 1,
            steps: vec![Step::answer(0.0)],
        };
        t.steps[0].faults = vec![Fault {
            kind: FaultKind::Hang,
            interrupt: false,
        }];
        // 3 × 2 + (5 s request timeout + 2 s) = 13.
        assert_eq!(cal().deadlines(&t).turn, 13.0);
        t.steps[0].faults.clear();
        t.steps[0].persist = Some(Persist {
            kind: FaultKind::Hang,
            calls: None,
        });
        // Never clears: retries + 1 = 4 hung calls: 6 + 4 × 7 = 34.
        assert_eq!(cal().deadlines(&t).turn, 34.0);
        let scaled = Calibration {
            scale: 2.0,
            ..cal()
        };
        assert_eq!(scaled.deadlines(&t).turn, 68.0);
        // Still far below the table's 90 s for a hang.
        assert!(cal().deadlines(&t).turn < 90.0);
    }

    #[test]
    fn the_warmup_trial_is_the_longest_healthy_script() {
        let c = Config::default();
        let t = Calibration::warmup_trial(&c);
        assert_eq!(t.steps.len() as u32, c.steps[1] + 1);
        assert_eq!(t.fault_count(), 0);
        assert!(t.answers());
    }
}
