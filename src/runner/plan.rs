//! What a scenario run starts from: [`Shared`] (what every scenario of a
//! run shares), [`Ids`] (one run's identity) and the [`Plan`], decided before
//! anything starts and pure: the session id, every turn's message, and a
//! chaos run's fault schedule drawn from its seed (the same seed always gives
//! the same schedule).

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::observe::{ChaosRecord, Observation, ScheduledFault};
use crate::proc_hygiene;
use crate::profile::Profile;
use crate::scenarios::{ChaosSpec, FaultAction, Scenario, MAX_FAULTS};

/// What every scenario of a run shares.
pub struct Shared {
    pub profile: Profile,
    pub agent_args: Vec<String>,
    /// Marks every process of this chaosrun invocation.
    pub run_id: String,
    /// How the run contains its processes (a cgroup per scenario, or the
    /// tag fallback).
    pub containment: Arc<proc_hygiene::RunContainment>,
    /// At most this many agents boot (spawn → `ready`) at once, first come
    /// first served: a boot storm of the whole table would otherwise slow the
    /// long scenarios that start first. Their boot deadline starts at spawn.
    pub boot_gate: Arc<tokio::sync::Semaphore>,
    /// The run's `--artifacts` folder: each scenario's agent sees only its
    /// own folder in it (`driver::mountns`).
    pub artifacts: Option<std::path::PathBuf>,
}

impl Shared {
    /// A gate as wide as the machine's CPUs.
    pub fn boot_gate() -> Arc<tokio::sync::Semaphore> {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Arc::new(tokio::sync::Semaphore::new(cpus))
    }
}

/// Identity of one scenario run.
pub struct Ids {
    pub tag: String,
    pub nonce: String,
    /// The run's seed (a chaos schedule derives its own from it).
    pub seed: u64,
}

/// What a scenario run will say and do, decided before anything starts.
pub(crate) struct Plan {
    scenario: String,
    tag: String,
    pub(crate) nonce: String,
    pub(crate) session_id: String,
    /// Every turn's message: the faulted one, a chaos run's others, the probe.
    pub(crate) turns: Vec<String>,
    pub(crate) chaos: Option<ChaosRecord>,
    probe_turn: u64,
    pub(crate) workers: usize,
    started_unix: f64,
    /// The scenario's seed (the responder's `p` rules draw from it).
    pub(crate) rule_seed: u64,
}

impl Plan {
    /// The scenario run's tag (its processes carry it; the sampler keys on it).
    pub(crate) fn tag(&self) -> &str {
        &self.tag
    }

    pub(crate) fn new(shared: &Shared, scenario: &Scenario, ids: &Ids, start: Instant) -> Plan {
        let workers = shared.profile.workers.max(1);
        let chaos = scenario.chaos.as_ref().map(|c| {
            let seed = scenario_seed(ids.seed, &scenario.id);
            let schedule = schedule(c, seed, workers);
            ChaosRecord {
                seed,
                bound: super::chaos_bound(scenario, workers, &schedule),
                schedule,
            }
        });
        let probe_turn = scenario.chaos.as_ref().map_or(1, |c| c.turns);
        let mut turns = vec![format!(
            "Chaos scenario {}: please carry out the task for session {}.",
            scenario.id, ids.nonce
        )];
        turns.extend((1..probe_turn).map(crate::observe::chaos_turn_message));
        turns.push(format!(
            "Are you still there? Reply with [[probe:{}]]",
            ids.nonce
        ));
        Plan {
            scenario: scenario.id.clone(),
            tag: ids.tag.clone(),
            nonce: ids.nonce.clone(),
            // Unique per run, even when `--seed` replays the nonces: a replay
            // must not meet the earlier run's session in a store that
            // outlives runs (Postgres).
            session_id: format!("chaos-{}-{}", scenario.id, ids.tag),
            turns,
            chaos,
            probe_turn,
            workers,
            started_unix: crate::units::unix_now() - start.elapsed().as_secs_f64(),
            rule_seed: scenario_seed(ids.seed, &scenario.id),
        }
    }

    /// The observation as planned, before anything was seen.
    pub(crate) fn observation(self, provider_offset: f64) -> Observation {
        let probe_message = self.turns.last().cloned().unwrap_or_default();
        let fault_message = self.turns.into_iter().next().unwrap_or_default();
        Observation {
            scenario: self.scenario,
            tag: self.tag,
            nonce: self.nonce,
            session_id: self.session_id,
            fault_message,
            probe_message,
            provider_offset,
            started_unix: self.started_unix,
            probe_turn: self.probe_turn,
            chaos: self.chaos,
            workers: self.workers,
            rule_seed: self.rule_seed,
            ..Observation::default()
        }
    }
}

/// A stable per-scenario seed from the run's seed and the scenario id, so
/// selecting other scenarios does not change this one's schedule.
pub fn scenario_seed(run_seed: u64, id: &str) -> u64 {
    // FNV-1a: stable across Rust versions, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ run_seed
}

/// The faults of a chaos run over `workers` agent processes, in time order
/// (at most [`MAX_FAULTS`]).
pub fn schedule(spec: &ChaosSpec, seed: u64, workers: usize) -> Vec<ScheduledFault> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut at = 0.0;
    while out.len() < MAX_FAULTS {
        at += rng.gen_range(spec.interval[0]..=spec.interval[1]);
        if at > spec.duration {
            return out;
        }
        let kill = rng.gen_bool(spec.kill_share);
        let stop_for = rng.gen_range(spec.stop_for[0]..=spec.stop_for[1]);
        let worker = rng.gen_range(0..workers.max(1));
        out.push(ScheduledFault {
            at,
            action: if kill {
                FaultAction::Kill
            } else {
                FaultAction::Stop
            },
            stop_for: if kill { 0.0 } else { stop_for },
            worker,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ChaosSpec {
        ChaosSpec {
            turns: 10,
            duration: 30.0,
            interval: [0.5, 1.5],
            kill_share: 0.5,
            stop_for: [0.2, 1.0],
            min_faults: 20,
        }
    }

    #[test]
    fn same_seed_same_schedule_other_seed_other_schedule() {
        let a = schedule(&spec(), 42, 1);
        assert_eq!(a, schedule(&spec(), 42, 1));
        assert_ne!(a, schedule(&spec(), 43, 1));
    }

    #[test]
    fn schedule_respects_its_bounds() {
        let s = schedule(&spec(), 7, 3);
        // 30 s at 0.5–1.5 s apart: between 20 and 60 faults.
        assert!((20..=60).contains(&s.len()), "{}", s.len());
        let mut prev = 0.0;
        for f in &s {
            assert!(f.at - prev >= 0.5 - 1e-9 && f.at - prev <= 1.5 + 1e-9);
            assert!(f.at <= 30.0);
            match f.action.kind_name() {
                "kill" => assert_eq!(f.stop_for, 0.0),
                "stop" => assert!((0.2..=1.0).contains(&f.stop_for)),
                other => panic!("{other}"),
            }
            prev = f.at;
        }
        assert!(
            s.iter().any(|f| f.action == FaultAction::Kill)
                && s.iter().any(|f| f.action == FaultAction::Stop)
        );
        // With three workers every one of them is picked.
        for w in 0..3 {
            assert!(s.iter().any(|f| f.worker == w), "worker {w} never picked");
        }
    }

    #[test]
    fn scenario_seed_depends_on_id_and_run_seed_only() {
        assert_eq!(scenario_seed(1, "a"), scenario_seed(1, "a"));
        assert_ne!(scenario_seed(1, "a"), scenario_seed(1, "b"));
        assert_ne!(scenario_seed(1, "a"), scenario_seed(2, "a"));
    }
}
