//! The outer bound on a scenario's drive: the sum of every deadline the
//! script can wait on, plus [`GRACE`]. Each wait of the script has its own
//! deadline; this one holds when they all do, so a drive past it means
//! chaosrun itself is stuck (a spawn into a frozen scope was one such
//! case). [`super::Drive::run`] then closes the agent (killed if it does
//! not exit) and the scenario ends in ERROR with its checks still made,
//! never a run that does not end.

use crate::driver::spawn::KILL_WAIT;
use crate::observe::ScheduledFault;
use crate::proc_hygiene::{FREEZE_SETTLE, FREEZE_WAITS_FOR_EXEC};
use crate::scenarios::Scenario;

/// Added to the sum of the deadlines (documented in docs/checks.md).
pub(crate) const GRACE: f64 = 60.0;

/// One kill and restart: the bounded kill-and-wait, then a boot.
fn restart(boot: f64) -> f64 {
    2.0 * KILL_WAIT.as_secs_f64() + boot
}

/// One stop and its continue, the freeze's own waits included.
fn stop(stop_for: f64) -> f64 {
    stop_for + 2.0 * (FREEZE_WAITS_FOR_EXEC + FREEZE_SETTLE).as_secs_f64()
}

/// Seconds the drive of `s` may take with `workers` workers and, for a
/// chaos row, its `schedule`.
pub(crate) fn seconds(s: &Scenario, workers: usize, schedule: Option<&[ScheduledFault]>) -> f64 {
    let dl = &s.deadlines;
    let w = workers.max(1) as f64;
    // Every worker booted, the close (exit deadline, then the kill).
    let ends = w * dl.boot + dl.exit + restart(0.0) + GRACE;
    let body = match (schedule, &s.chaos) {
        (Some(faults), Some(spec)) => {
            // Each turn (and the probe) starts up and works within its own
            // deadlines from the last turn's end.
            let turns = (spec.turns + 1) as f64 * (dl.boot + dl.turn);
            let faults: f64 = faults
                .iter()
                .map(|f| match f.action.restarts() {
                    true => restart(dl.boot),
                    false => stop(f.stop_for),
                })
                .sum();
            turns + faults
        }
        _ => {
            let fault = s
                .process_fault
                .as_ref()
                .map_or(0.0, |f| match f.action.restarts() {
                    true => w * restart(dl.boot),
                    false => stop(f.stop_for),
                });
            // The faulted turn (start-up, deadline, an interrupt's), the
            // probe (start-up, deadline).
            dl.boot + dl.turn + dl.interrupt + fault + dl.boot + dl.probe
        }
    };
    ends + body
}

/// Seconds a chaos run of `s` over `workers` workers may take once they
/// booted: its `duration` (when the last fault comes due), the longest
/// landing of a fault of its `schedule` (a restart, a stop), then, per
/// worker, a turn in flight (its start-up and its deadline), and the probe
/// (its start-up and deadline). A run still going then is cut: the
/// conversation did not keep pace with the row's own declaration. The
/// chaos script does not count exec-mode turns' start-ups against it (each
/// is bounded by the boot deadline on its own).
pub(crate) fn chaos_run(s: &Scenario, workers: usize, schedule: &[ScheduledFault]) -> f64 {
    let dl = &s.deadlines;
    let duration = s.chaos.as_ref().map_or(0.0, |c| c.duration);
    let landing = schedule
        .iter()
        .map(|f| match f.action.restarts() {
            true => restart(dl.boot),
            false => stop(f.stop_for),
        })
        .fold(0.0, f64::max);
    let in_flight = workers.max(1) as f64 * (dl.boot + dl.turn);
    duration + landing + in_flight + dl.boot + dl.probe
}

/// What the observation says of a drive stopped at its bound of `limit` s.
pub(crate) fn overran(limit: f64) -> String {
    format!(
        "its drive ran past its bound of {limit:.0} s (every deadline it can wait on plus {GRACE:.0} s) and was stopped, the agent closed: a chaosrun bug, please report it with this row"
    )
}

/// Debug builds only: `CHAOSRUN_TEST_STUCK=<scenario id>` makes that
/// scenario's drive stick after the boot, with a bound of 3 s (what
/// tests/verdicts.rs checks: the bound ends it). `None` otherwise.
pub(crate) fn test_stuck(id: &str) -> Option<f64> {
    let stuck =
        cfg!(debug_assertions) && std::env::var("CHAOSRUN_TEST_STUCK").is_ok_and(|v| v == id);
    stuck.then_some(3.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(yaml: &str) -> Scenario {
        let table = format!("scenarios:\n{yaml}");
        crate::scenarios::load_str(&table, "t.yaml")
            .expect("a valid table")
            .scenarios
            .remove(0)
    }

    /// The bound covers every deadline the script can wait on, plus the
    /// grace, and grows with a chaos row's turns and faults.
    #[test]
    fn the_bound_is_every_deadline_plus_the_grace() {
        let s = row("  - id: a\n    about: x\n    deadlines: {boot: 10, turn: 20, interrupt: 5, probe: 30, exit: 7, reap: 3}\n    responder: [{reply: {kind: text, text: hi}}]\n    expect: {answer: hi}\n");
        let plain = seconds(&s, 1, None);
        assert_eq!(
            plain,
            10.0 + 7.0 + 20.0 + GRACE + (10.0 + 20.0 + 5.0 + 10.0 + 30.0)
        );
        let c = row("  - id: c\n    about: x\n    deadlines: {boot: 10, turn: 20, interrupt: 5, probe: 30, exit: 7, reap: 3}\n    chaos: {turns: 3, duration: 5, min_faults: 1}\n    responder: [{reply: {kind: text, text: hi}}]\n    expect: survives\n");
        let kill = ScheduledFault {
            at: 1.0,
            action: crate::scenarios::FaultAction::Kill,
            stop_for: 0.0,
            worker: 0,
        };
        let none = seconds(&c, 1, Some(&[]));
        assert_eq!(none, 10.0 + 7.0 + 20.0 + GRACE + 4.0 * 30.0);
        assert_eq!(seconds(&c, 1, Some(&[kill])), none + 30.0);
    }

    /// A chaos run's own bound: its duration, the longest landing of a
    /// fault (a kill's restart here), a turn in flight per worker, the
    /// probe; not the sum over every turn.
    #[test]
    fn a_chaos_runs_bound_comes_from_its_declaration() {
        let c = row("  - id: c\n    about: x\n    deadlines: {boot: 10, turn: 20, interrupt: 5, probe: 30, exit: 7, reap: 3}\n    chaos: {turns: 80, duration: 5, min_faults: 1}\n    responder: [{reply: {kind: text, text: hi}}]\n    expect: survives\n");
        let kill = ScheduledFault {
            at: 1.0,
            action: crate::scenarios::FaultAction::Kill,
            stop_for: 0.0,
            worker: 0,
        };
        let two = [kill.clone(), kill];
        let want = 5.0 + restart(10.0) + (10.0 + 20.0) + (10.0 + 30.0);
        assert_eq!(chaos_run(&c, 1, &two), want);
        assert_eq!(chaos_run(&c, 2, &two), want + 30.0);
    }
}
