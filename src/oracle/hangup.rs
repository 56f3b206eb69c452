//! `exits_on_hangup`, for a row whose process fault is `hangup` (the
//! agent's terminal closed): the agent must exit of it on its own. Judged
//! over the saved events: after a recorded `hangup` that reached a process,
//! the agent's next recorded exit must be one chaosrun did not cause
//! (`killed_by_chaosrun: false`); chaosrun SIGKILLs an agent still running
//! [`crate::driver::spawn::KILL_WAIT`] after the hangup, and that exit fails
//! the check (the agent kept running with no terminal, claude-code #20117).
//! `not checked` when no hangup reached a process (that is `fault_landed`'s),
//! no exit was recorded after it, or the agent said `closed` (it ended its
//! last turn: a driver-protocol agent runs the probe turn at once after its
//! answer, so its exit then says nothing of the hangup).

use super::{Check, Invariant};
use crate::observe::{Event, Observation};
use crate::scenarios::{Landing, Sent};

pub const NAME: &str = "exits_on_hangup";

/// The check, for a row with a `hangup` fault; `None` for any other row.
pub fn check(obs: &Observation) -> Option<Check> {
    let inv = Invariant::ProcessHygiene;
    let mut events = obs.events.iter();
    let hung_up = events.find(|t| {
        matches!(t.event, Event::ProcessFault { action: Sent::Action(a), .. } if a.lands() == Landing::Hangup)
    })?;
    let Event::ProcessFault { signalled, .. } = hung_up.event else {
        return None;
    };
    if signalled == 0 {
        return Some(Check::skipped(inv, NAME, "the hangup reached no process"));
    }
    let exit = events.find_map(|t| match t.event {
        Event::Closed if t.worker == hung_up.worker => Some(None),
        Event::Exited {
            killed_by_chaosrun, ..
        } if t.worker == hung_up.worker => Some(Some((t.at, killed_by_chaosrun))),
        _ => None,
    });
    Some(match exit {
        None => Check::skipped(inv, NAME, "no exit of the agent was recorded after the hangup"),
        Some(None) => Check::skipped(
            inv,
            NAME,
            "the agent ended its last turn and closed after the hangup (the driver protocol gives it every turn at once): its exit says nothing of the hangup",
        ),
        Some(Some((_, false))) => Check::new(inv, NAME, vec![]),
        Some(Some((at, true))) => Check::new(
            inv,
            NAME,
            vec![format!(
                "the agent was still running {:.1} s after its terminal closed (hangup at {:.1} s); chaosrun killed it",
                at - hung_up.at,
                hung_up.at
            )],
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Timed;
    use crate::oracle::fixtures::{at, end, healthy, scenario};
    use crate::oracle::Status;
    use crate::scenarios::FaultAction;

    /// An observation whose agent was hung up at 1 s, then `after`.
    fn hung_up(signalled: usize, after: Vec<Timed>) -> Observation {
        let s = scenario("process_fault: {action: hangup, at: {after_calls: 1}}\nexpect: killed");
        let mut obs = healthy(&s, end(0, true, false, "x"));
        obs.events = vec![at(
            1.0,
            Event::ProcessFault {
                action: Sent::Action(FaultAction::Hangup),
                signalled,
                main_calls: 1,
                start_up: false,
            },
        )];
        obs.events.extend(after);
        obs
    }

    fn exited(t: f64, killed_by_chaosrun: bool) -> Timed {
        at(
            t,
            Event::Exited {
                code: None,
                signal: Some(libc::SIGHUP),
                killed_by_chaosrun,
            },
        )
    }

    #[test]
    fn an_agent_that_exits_of_the_hangup_passes_and_one_killed_fails() {
        let pass = check(&hung_up(1, vec![exited(1.1, false)])).unwrap();
        assert_eq!(pass.status, Status::Pass);
        let fail = check(&hung_up(1, vec![exited(11.0, true)])).unwrap();
        assert!(
            fail.violations()[0].contains("still running 10.0 s after its terminal closed"),
            "{fail:?}"
        );
    }

    #[test]
    fn no_hangup_no_check_and_an_unlanded_or_closed_one_is_not_checked() {
        let s = scenario("process_fault: {action: kill, at: {after_calls: 1}}\nexpect: killed");
        assert!(check(&healthy(&s, end(0, true, false, "x"))).is_none());
        let missed = check(&hung_up(0, vec![exited(11.0, true)])).unwrap();
        assert!(
            matches!(missed.status, Status::NotChecked { .. }),
            "{missed:?}"
        );
        let closed = check(&hung_up(
            1,
            vec![at(2.0, Event::Closed), exited(2.1, false)],
        ))
        .unwrap();
        assert!(
            matches!(closed.status, Status::NotChecked { .. }),
            "{closed:?}"
        );
    }
}
