//! No zombie children (`no_zombie_children`, process hygiene; claude-code
//! #58000): a child process of the agent's tree that exited must be reaped.
//! The evidence is the sampler's: each sample lists the zombie children of
//! the scenario's processes (pid, parent, start time); one is awaited at
//! each turn's end and as the agent is asked to close, besides the ticks
//! twice a second. A zombie seen at one sample (a turn's end, a
//! tick) and still there (same pid and start time) at a sample at least
//! [`ZOMBIE_GAP`] later (the next turn's end, the close, a tick) fails,
//! naming the pid, its name, its parent and the turn; one reaped in time
//! passes (the gap is there for a child that exited a moment before a
//! sample, and an orphan a subreaper agent reaps on its own cadence), as
//! does one gone with its parent (the agent's exit recorded after it, before
//! a sample the gap later could be taken).
//! `not checked` in exec mode (a process per turn: when it exits at the
//! turn's end its children are re-parented and reaped with it), when no
//! sample looked for zombies (an observation saved before they were
//! sampled), and when nothing failed but a zombie was still there at every
//! later sample, none the gap after it (whether it was reaped is not known).

use std::time::Duration;

use super::{Check, Invariant};
use crate::observe::{Event, Observation, ProcSample, Zombie};

const NAME: &str = "no_zombie_children";

/// How long a zombie must outlast its first sighting to count as left
/// unreaped.
pub const ZOMBIE_GAP: Duration = Duration::from_secs(1);

/// What a sample was: where it was taken.
fn which(p: &ProcSample) -> String {
    match (p.turn_end, p.close) {
        (Some(i), _) => format!("turn {i}'s end"),
        (None, true) => "the close".into(),
        (None, false) => "a tick".into(),
    }
}

/// Where the first sighting was: at a turn's end, or in the turn running
/// then (the latest `turn_start` before it).
fn when(obs: &Observation, p: &ProcSample) -> String {
    if let Some(i) = p.turn_end {
        return format!("at turn {i}'s end ({:.1} s)", p.at);
    }
    let running = obs.events.iter().rev().find_map(|t| match t.event {
        Event::TurnStart { i } if t.at <= p.at => Some(i),
        _ => None,
    });
    match running {
        Some(i) => format!("in turn {i} ({:.1} s, {})", p.at, which(p)),
        None => format!("before the first turn ({:.1} s)", p.at),
    }
}

/// Whether an agent process's exit was recorded at or after `at`.
fn exited_after(obs: &Observation, at: f64) -> bool {
    obs.events
        .iter()
        .any(|t| t.at >= at && matches!(t.event, Event::Exited { .. }))
}

/// The spans chaosrun kept the agent paused (a `stop` or `suspend` until
/// its `cont`; one never continued runs to the end): a paused parent
/// cannot reap, so that time is no evidence of a child left unreaped.
fn paused(obs: &Observation) -> Vec<(f64, f64)> {
    let mut spans = Vec::new();
    let mut from = None;
    for t in &obs.events {
        if let Event::ProcessFault { action, .. } = &t.event {
            if action.pauses() {
                from.get_or_insert(t.at);
            } else if *action == crate::scenarios::Sent::Cont {
                if let Some(f) = from.take() {
                    spans.push((f, t.at));
                }
            }
        }
    }
    spans.extend(from.map(|f| (f, f64::INFINITY)));
    spans
}

/// Seconds from `a` to `b` the agent was not paused.
fn running(a: f64, b: f64, paused: &[(f64, f64)]) -> f64 {
    let held: f64 = paused
        .iter()
        .map(|&(f, t)| (t.min(b) - f.max(a)).max(0.0))
        .sum();
    (b - a) - held
}

fn same(a: &Zombie, b: &Zombie) -> bool {
    a.pid == b.pid && a.start == b.start
}

pub fn check(obs: &Observation) -> Check {
    let inv = Invariant::ProcessHygiene;
    if obs.turn_model().start_up {
        let why = "a process per turn (exec mode): its children are re-parented and reaped as it exits at the turn's end";
        return Check::skipped(inv, NAME, why);
    }
    let mut looked: Vec<&ProcSample> = obs
        .proc_samples
        .iter()
        .filter(|p| p.zombies.is_some())
        .collect();
    looked.sort_by(|a, b| a.at.total_cmp(&b.at));
    if looked.is_empty() {
        let why =
            "no sample looked for zombie children (an observation saved before they were sampled)";
        return Check::skipped(inv, NAME, why);
    }
    let gap = ZOMBIE_GAP.as_secs_f64();
    let paused = paused(obs);
    let (mut violations, mut unjudged) = (Vec::new(), None);
    // Each zombie judged once, from its first sighting: left unreaped when a
    // sample at least the gap later still holds it; reaped when a later
    // sample no longer does (its parent's exit takes it too); unjudged when
    // every later sample, all within the gap, still holds it.
    let mut judged: Vec<&Zombie> = Vec::new();
    for (k, first) in looked.iter().enumerate() {
        for z in first.zombies.iter().flatten() {
            if judged.iter().any(|n| same(n, z)) {
                continue;
            }
            judged.push(z);
            let holds = |p: &&&ProcSample| p.zombies.iter().flatten().any(|o| same(o, z));
            let later = &looked[k + 1..];
            let apart = |p: &&&ProcSample| running(first.at, p.at, &paused) >= gap;
            let still = later.iter().filter(apart).find(holds);
            let Some(still) = still else {
                // Reaped, or gone with its parent: the agent exited before
                // a sample the gap later could be taken.
                let gone = !later.iter().all(|p| holds(&p)) || exited_after(obs, first.at);
                if !gone {
                    unjudged.get_or_insert((z, *first));
                }
                continue;
            };
            violations.push(format!(
                "child process {} (`{}`; a zombie's command line is gone) of pid {} (`{}`) was left unreaped: a zombie {} and still one at {} ({:.1} s)",
                z.pid,
                z.name,
                z.ppid,
                z.parent,
                when(obs, first),
                which(still),
                still.at
            ));
        }
    }
    if let (true, Some((z, first))) = (violations.is_empty(), unjudged) {
        let why = format!(
            "child process {} (`{}`) was a zombie {} and still one at every later sample, none {gap:.0} s after it: whether it was reaped is not known",
            z.pid,
            z.name,
            when(obs, first)
        );
        return Check::skipped(inv, NAME, why);
    }
    Check::new(inv, NAME, violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::TurnModel;
    use crate::oracle::fixtures::{end, healthy, sample, scenario};

    #[test]
    fn time_the_agent_was_paused_does_not_count_toward_the_gap() {
        let spans = [(2.0, 5.0)];
        assert_eq!(running(1.0, 6.0, &spans), 2.0);
        assert_eq!(running(2.5, 4.5, &spans), 0.0);
        assert_eq!(running(0.0, 1.5, &spans), 1.5);
        assert_eq!(running(4.0, 7.0, &[(3.0, f64::INFINITY)]), 0.0);
    }

    fn zombie(pid: i32, start: u64) -> Zombie {
        Zombie {
            pid,
            ppid: 10,
            start,
            name: "true".into(),
            parent: "python3 agent.py".into(),
        }
    }

    /// A sample at `at` s seeing `zombies`, taken at turn `turn`'s end (or,
    /// with None, the close).
    fn seen(at: f64, turn: Option<u64>, zombies: Vec<Zombie>) -> ProcSample {
        ProcSample {
            turn_end: turn,
            close: turn.is_none(),
            zombies: Some(zombies),
            ..sample(at, 30)
        }
    }

    fn observation(samples: Vec<ProcSample>) -> Observation {
        let mut o = healthy(&scenario("expect: error"), end(0, false, true, ""));
        o.proc_samples = samples;
        // The agent's exit is added where a case needs it.
        o.events
            .retain(|t| !matches!(t.event, Event::Exited { .. }));
        o
    }

    #[test]
    fn a_zombie_still_there_a_second_later_fails_naming_it_and_the_turn() {
        let o = observation(vec![
            seen(1.0, Some(0), vec![zombie(42, 7)]),
            seen(1.3, Some(1), vec![zombie(42, 7)]),
            seen(2.1, None, vec![zombie(42, 7)]),
        ]);
        let c = check(&o);
        let v = c.violations();
        assert_eq!(v.len(), 1, "{c:?}");
        assert!(v[0].contains("child process 42 (`true`"), "{v:?}");
        assert!(v[0].contains("of pid 10 (`python3 agent.py`)"), "{v:?}");
        assert!(v[0].contains("a zombie at turn 0's end (1.0 s)"), "{v:?}");
        assert!(v[0].contains("still one at the close (2.1 s)"), "{v:?}");
    }

    #[test]
    fn a_zombie_of_an_agent_chaosrun_paused_is_not_charged_for_the_pause() {
        use crate::scenarios::{FaultAction, Sent};
        let fault = |at: f64, action: Sent| {
            crate::oracle::fixtures::at(
                at,
                Event::ProcessFault {
                    action,
                    signalled: 1,
                    main_calls: 1,
                    start_up: false,
                },
            )
        };
        let mut o = observation(vec![
            seen(2.0, None, vec![zombie(42, 7)]),
            seen(3.0, None, vec![zombie(42, 7)]),
            seen(4.5, None, vec![]),
        ]);
        o.events.push(fault(1.5, Sent::Action(FaultAction::Stop)));
        o.events.push(fault(4.0, Sent::Cont));
        o.events.sort_by(|a, b| a.at.total_cmp(&b.at));
        assert_eq!(
            check(&o).status,
            crate::oracle::Status::Pass,
            "{:?}",
            check(&o)
        );
        // Still there a second after the cont: left unreaped.
        o.proc_samples.last_mut().unwrap().zombies = Some(vec![zombie(42, 7)]);
        o.proc_samples.push(seen(5.2, None, vec![zombie(42, 7)]));
        assert_eq!(check(&o).violations().len(), 1, "{:?}", check(&o));
    }

    #[test]
    fn a_zombie_reaped_in_time_or_a_reused_pid_passes() {
        // Reaped by the close sample.
        let o = observation(vec![
            seen(1.0, Some(0), vec![zombie(42, 7)]),
            seen(1.3, Some(1), vec![zombie(42, 7)]),
            seen(2.1, None, vec![]),
        ]);
        assert_eq!(check(&o).status, crate::oracle::Status::Pass);
        // The same pid later is another process (another start time).
        let o = observation(vec![
            seen(1.0, Some(0), vec![zombie(42, 7)]),
            seen(2.1, None, vec![zombie(42, 9)]),
            seen(2.5, None, vec![]),
        ]);
        assert_eq!(check(&o).status, crate::oracle::Status::Pass);
    }

    #[test]
    fn no_evidence_is_not_checked_with_its_reason() {
        let reason = |o: &Observation| check(o).not_checked_reason().map(str::to_string);
        let o = observation(vec![sample(1.0, 30)]);
        assert!(reason(&o).unwrap().contains("no sample looked"));
        // First seen at a tick in turn 0, still there at the close.
        let mut tick = seen(0.5, Some(0), vec![zombie(42, 7)]);
        (tick.turn_end, tick.close) = (None, false);
        let o = observation(vec![tick, seen(2.1, None, vec![zombie(42, 7)])]);
        let v = check(&o).violations().join("\n");
        assert!(v.contains("a zombie in turn 0 (0.5 s, a tick)"), "{v}");
        let o = observation(vec![
            seen(1.0, Some(0), vec![zombie(42, 7)]),
            seen(1.5, None, vec![zombie(42, 7)]),
        ]);
        assert!(reason(&o).unwrap().contains("none 1 s after it"));
        // Still there at every later sample: gone with the agent if it
        // exited after (within the gap: not left unreaped for it).
        let mut o = observation(vec![
            seen(1.0, Some(0), vec![zombie(42, 7)]),
            seen(1.1, None, vec![zombie(42, 7)]),
        ]);
        assert!(reason(&o).unwrap().contains("none 1 s after it"));
        o.events.push(crate::oracle::fixtures::at(
            1.2,
            Event::Exited {
                code: Some(0),
                signal: None,
                killed_by_chaosrun: false,
            },
        ));
        assert_eq!(check(&o).status, crate::oracle::Status::Pass);
        // Gone at the next sample, however soon: reaped (or gone with its
        // parent); no zombie at all on a short row: nothing left unreaped.
        let o = observation(vec![
            seen(1.0, Some(0), vec![zombie(42, 7)]),
            seen(1.2, None, vec![]),
        ]);
        assert_eq!(check(&o).status, crate::oracle::Status::Pass);
        let o = observation(vec![seen(1.0, Some(0), vec![])]);
        assert_eq!(check(&o).status, crate::oracle::Status::Pass);
        let mut o = observation(vec![
            seen(1.0, Some(0), vec![zombie(42, 7)]),
            seen(2.1, None, vec![zombie(42, 7)]),
        ]);
        o.turn_model = Some(TurnModel::EXEC);
        assert!(reason(&o).unwrap().contains("exec mode"));
    }
}
