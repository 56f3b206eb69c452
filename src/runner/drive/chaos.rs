//! A seeded chaos run's script: the loop that drives a long conversation
//! while the schedule (drawn in [`crate::runner::plan::schedule`])
//! kills an agent process (then resumes it at the first unfinished turn) or
//! stops it. In worker mode each fault picks one
//! of the workers; a single agent's stops freeze its whole tree (its cgroup,
//! or what the tag fallback finds). In exec mode the faults land in a turn's
//! working time (after its process first reached the provider), and each
//! turn's start-up is bounded by the boot deadline, not the turn's. The
//! whole run is bounded by the row's own declaration
//! ([`super::bound::chaos_run`]): a conversation still going then is cut.

use std::collections::BTreeSet;

use tokio::time::{sleep_until, Instant};

use super::faults::{Hit, Landed};
use super::{Drive, Next};
use crate::observe::{ChaosRecord, Event, Phase, ScheduledFault, TurnModel};
use crate::provider::Provider;
use crate::scenarios::{FaultTarget, Scenario};
use crate::units::secs;

/// The run's pace: each turn must end within the turn deadline of the
/// previous one's end (or of a restart), so a slow but live agent is not
/// failed for its pace. In exec mode each turn's process must first reach
/// the provider within the boot deadline of its spawn, and the turn deadline
/// runs from that first request.
struct Pace {
    turn: f64,
    boot: f64,
    model: TurnModel,
    deadline: Instant,
    /// An exec-mode turn's process is starting up (the boot deadline runs).
    starting: bool,
    /// When the run is cut: its bound after the boot, pushed back by every
    /// exec-mode turn's start-up (each bounded by the boot deadline; a
    /// process's own boot is not the conversation's pace).
    cut: Instant,
    /// Since when the current exec-mode turn has been starting up.
    starting_since: Option<Instant>,
}

impl Pace {
    fn on(&mut self, at: Instant, ev: &Event) {
        match ev {
            Event::TurnStart { .. } if self.model.start_up => {
                (self.starting, self.deadline) = (true, at + secs(self.boot));
                self.starting_since = Some(at);
            }
            Event::FirstCall { .. } => {
                (self.starting, self.deadline) = (false, at + secs(self.turn));
                if let Some(since) = self.starting_since.take() {
                    self.cut += at.saturating_duration_since(since);
                }
            }
            _ => {}
        }
    }

    /// A turn ended, or the agent was restarted.
    fn reset(&mut self, restart: bool) {
        let by = Instant::now() + secs(self.turn);
        self.deadline = if restart { self.deadline.max(by) } else { by };
    }

    fn missed(&self, d: &mut Drive) {
        match self.starting {
            true => d.missed(Phase::StartUp, self.boot),
            false => d.missed(Phase::FaultedTurn, self.turn),
        }
    }
}

/// What the loop keeps over a chaos run.
struct Run {
    pace: Pace,
    /// The spec's turns are the conversation, then the probe.
    probe: u64,
    ended: BTreeSet<u64>,
    closed: BTreeSet<usize>,
}

impl Run {
    /// Record an event of worker `k`; whether it ended the probe turn.
    async fn event(&mut self, d: &mut Drive<'_>, at: Instant, k: usize, ev: Event) -> bool {
        let mut done = false;
        match &ev {
            Event::TurnStart { i } if *i == self.probe => d.snapshot("probe_turn_start").await,
            Event::TurnEnd(t) => {
                if self.ended.insert(t.i) {
                    self.pace.reset(false);
                }
                done = t.i == self.probe;
            }
            Event::Closed => {
                self.closed.insert(k);
            }
            _ => {}
        }
        self.pace.on(at, &ev);
        let ended = match &ev {
            Event::TurnEnd(t) => Some(t.i),
            _ => None,
        };
        d.push_from(at, k, ev);
        if let Some(i) = ended {
            d.turn_ended(Some(i)).await;
        }
        done
    }

    /// Land fault `f` on worker `k`: a kill (then the agent resumed at the
    /// first unfinished turn) or a stop. Whether the agent is still going.
    async fn land(
        &mut self,
        d: &mut Drive<'_>,
        (f, k): (&ScheduledFault, usize),
        s: &Scenario,
        (calls, provider): (u64, &Provider),
    ) -> bool {
        let probe = self.probe;
        let start = (0..=probe)
            .find(|i| !self.ended.contains(i))
            .unwrap_or(probe);
        // One agent's stop freezes its whole tree; a worker's, only itself.
        let target = if f.action.restarts() || d.count() > 1 {
            FaultTarget::Agent
        } else {
            FaultTarget::Tree
        };
        let hit = Hit {
            action: f.action,
            target,
            stop_for: f.stop_for,
            headroom_mb: 0,
            main_calls: calls,
            resume: (start, s.deadlines.boot),
            copy_store: false,
            damage: None,
            deadline: self.pace.deadline,
            provider,
        };
        match d.land(k, hit).await {
            Landed::Revived(false) | Landed::Missed => false,
            // A restarted exec-mode agent's turn starts up again: its
            // `turn_start`, read next, moves the pace on.
            Landed::Revived(true) => {
                self.pace.reset(true);
                true
            }
            Landed::GoesOn => true,
        }
    }
}

/// Drive a chaos run; returns whether every turn got through (`Err`: setup).
/// A fault that comes due while its worker's exec-mode turn is still
/// starting up is held until that turn's first request to the provider, so
/// every fault lands in a turn's working time. The run is cut at its
/// `bound` after the boot (recorded as [`Event::ChaosBoundReached`]).
pub(crate) async fn drive(
    d: &mut Drive<'_>,
    s: &Scenario,
    chaos: &ChaosRecord,
    provider: &Provider,
) -> Result<bool, String> {
    let schedule = chaos.schedule.as_slice();
    let dl = &s.deadlines;
    if !d.boot_all(dl.boot).await? {
        return Ok(false);
    }
    let spec = s.chaos.as_ref().expect("a chaos scenario");
    d.phase(Phase::FaultedTurn, dl.turn);
    let t0 = Instant::now();
    let pace = Pace {
        turn: dl.turn,
        boot: dl.boot,
        model: d.turn_model(),
        deadline: t0 + secs(dl.turn),
        starting: false,
        cut: t0 + secs(chaos.bound),
        starting_since: None,
    };
    let mut run = Run {
        pace,
        probe: spec.turns,
        ended: BTreeSet::new(),
        closed: BTreeSet::new(),
    };
    // Events of the first turn read while booting.
    for (at, ev) in d.recorded_since_spawn(0) {
        run.pace.on(at, &ev);
    }
    let mut next = schedule.iter();
    let mut fault = next.next();
    let mut held: Option<&ScheduledFault> = None;
    loop {
        let fault_at = fault.filter(|_| held.is_none()).map(|f| t0 + secs(f.at));
        tokio::select! {
            line = d.next() => match line {
                // A worker that said `closed` may exit; any other exit is a crash.
                Next::Eof(k) if run.closed.contains(&k) => {}
                Next::Eof(_) => return Ok(false),
                Next::Event(at, k, ev) => {
                    if run.event(d, at, k, ev).await {
                        return Ok(true);
                    }
                }
            },
            _ = sleep_until(fault_at.unwrap_or(t0)), if fault_at.is_some() => {
                held = fault;
                fault = next.next();
            }
            _ = sleep_until(run.pace.deadline) => {
                run.pace.missed(d);
                return Ok(false);
            }
            _ = sleep_until(run.pace.cut) => {
                d.push(Instant::now(), Event::ChaosBoundReached { seconds: chaos.bound });
                return Ok(false);
            }
        }
        let Some(f) = held else { continue };
        let k = f.worker.min(d.count() - 1);
        if d.starting_up(k) {
            continue;
        }
        held = None;
        let calls = *provider.main_calls().borrow();
        if !run.land(d, (f, k), s, (calls, provider)).await {
            return Ok(false);
        }
    }
}
