//! A subagent that outlives its parent's turn: on rows that start a subagent,
//! no call marked as the subagent's (`[[subagent:NONCE]]`) reaches the
//! provider once the faulted turn has ended (answer, deadline or interrupt),
//! unless a later turn that may start a subagent of its own is running; and
//! no subagent call made during a turn is still open (its answer not over,
//! its connection not closed: [`RequestRecord::ended`]) more than
//! [`OPEN_GRACE`] after that turn ended: a subagent left inside its hung
//! model call when the parent gave up makes no new call, but the provider
//! sees the call still open (issue 47.4). The provider holds the probe
//! turn's call while a subagent call is open (for up to 3 s,
//! `provider::server::answering::SUBAGENT_CLOSE_WAIT`), so such an agent
//! cannot close, and drop the call with its process, before the grace is
//! past. A call recorded without its end (an older observation) is judged
//! on the calls it made only.
//!
//! [`RequestRecord::ended`]: crate::provider::recording::RequestRecord::ended

use super::{unless_partial, Check, Invariant};
use crate::observe::Observation;
use crate::provider::replies::tool_call::SUBAGENT;
use crate::provider::CallKind;
use crate::scenarios::Scenario;

const NAME: &str = "subagent_outlived_turn";

/// Late calls listed in a violation, at most.
const LISTED: usize = 10;

/// Seconds a subagent's call may stay open after its parent's turn ended:
/// the parent stops its subagent as its turn ends, and the provider sees
/// the connection close a moment later (more under load).
pub const OPEN_GRACE: f64 = 1.0;

/// The row's responder answers the subagent (`subagent: true` rules) or has
/// the parent call the `subagent` tool.
fn starts_subagent(s: &Scenario) -> bool {
    s.responder.iter().any(|r| {
        r.when.subagent == Some(true) || r.reply.tool_calls().iter().any(|c| c.tool == SUBAGENT)
    })
}

/// The turns that may start a subagent (0 .. the probe turn), each as
/// (start, end) on the run's clock; `None` for a turn without its event.
fn turn_windows(obs: &Observation) -> Vec<(Option<f64>, Option<f64>)> {
    (0..obs.probe_turn.max(1))
        .map(|i| (obs.turn_start(i), obs.turn_end(i).map(|(at, _)| at)))
        .collect()
}

/// How long after the last ended turn `at` falls, when no turn that may
/// start a subagent is running then; `None` while one is (or before turn 0
/// ended).
fn late_by(windows: &[(Option<f64>, Option<f64>)], at: f64) -> Option<f64> {
    let running = windows
        .iter()
        .skip(1)
        .any(|(start, end)| start.is_some_and(|s| at >= s) && end.is_none_or(|e| at <= e));
    if running {
        return None;
    }
    windows
        .iter()
        .filter_map(|(_, end)| *end)
        .filter(|e| at > *e)
        .map(|e| at - e)
        .reduce(f64::min)
}

pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    if !starts_subagent(s) {
        return None;
    }
    let inv = Invariant::ProviderCalls;
    if obs.turn_end(0).is_none() {
        return Some(Check::skipped(
            inv,
            NAME,
            "the faulted turn never ended, so no subagent call can be said to come after it",
        ));
    }
    if obs.recording.subagent_calls == 0 {
        return Some(Check::skipped(
            inv,
            NAME,
            "the subagent never called the provider",
        ));
    }
    let windows = turn_windows(obs);
    let subagent: Vec<_> = obs
        .recording
        .requests
        .iter()
        .filter(|r| r.kind == CallKind::Subagent)
        .collect();
    let late: Vec<f64> = subagent
        .iter()
        .filter_map(|r| late_by(&windows, r.at + obs.provider_offset))
        .collect();
    let open: Vec<f64> = subagent
        .iter()
        .filter(|r| late_by(&windows, r.at + obs.provider_offset).is_none())
        .filter_map(|r| late_by(&windows, r.ended? + obs.provider_offset))
        .filter(|d| *d > OPEN_GRACE)
        .collect();
    let mut v = Vec::new();
    if !late.is_empty() {
        v.push(violation(&late));
    }
    if !open.is_empty() {
        v.push(left_open(&open));
    }
    let hidden = obs.recording.subagent_calls > subagent.len() as u64;
    let why = hidden.then(|| {
        format!(
            "{} of the subagent's {} calls were not kept (the recording's cap), so a late one may be hidden",
            obs.recording.subagent_calls - subagent.len() as u64,
            obs.recording.subagent_calls
        )
    });
    Some(unless_partial(Check::new(inv, NAME, v), why))
}

/// `the subagent called the provider 3 times after the parent's turn ended:
/// +0.4 s, +1.1 s, +2.0 s`.
fn violation(late: &[f64]) -> String {
    let mut times: Vec<String> = late
        .iter()
        .take(LISTED)
        .map(|d| format!("+{d:.1} s"))
        .collect();
    if late.len() > LISTED {
        times.push(format!("… ({} more)", late.len() - LISTED));
    }
    let n = late.len();
    format!(
        "the subagent called the provider {n} time{} after the parent's turn ended: {}",
        if n == 1 { "" } else { "s" },
        times.join(", ")
    )
}

/// `the subagent's model call made during the turn was still open 3.0 s
/// after the parent's turn ended (…)`.
fn left_open(open: &[f64]) -> String {
    let times: Vec<String> = open
        .iter()
        .take(LISTED)
        .map(|d| format!("+{d:.1} s"))
        .collect();
    let n = open.len();
    format!(
        "{n} model call{s} the subagent made during the parent's turn {was} still open after that turn \
         ended, closing only {} after it (the grace is {OPEN_GRACE} s): the subagent was left inside its call",
        times.join(", "),
        s = if n == 1 { "" } else { "s" },
        was = if n == 1 { "was" } else { "were" },
    )
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::message::Message;

    const RULES: &str = "[{when: {subagent: true}, reply: {kind: hang}}, \
        {reply: {kind: tool_call, calls: [{tool: subagent, args: {prompt: go}}]}}]";

    /// A run whose faulted turn ends at 3.0 s (on the run's clock, the
    /// provider started 0.5 s in), with subagent calls at `sub` seconds on
    /// the provider's clock.
    fn run(sub: &[f64]) -> (Scenario, Observation) {
        let mut s = scenario("expect: interrupted\ninterrupt: {when_subagent_call: 1}");
        s.responder = serde_yaml::from_str(RULES).unwrap();
        let mut o = healthy(&s, end_interrupted(0));
        o.provider_offset = 0.5;
        for (k, at) in sub.iter().enumerate() {
            let mut r = request(
                10 + k as u64,
                CallKind::Subagent,
                vec![Message::new("user", "go [[subagent:N0NCE]]")],
            );
            r.at = *at;
            r.main_index = Some(k as u64);
            o.recording.requests.push(r);
        }
        o.recording.subagent_calls = sub.len() as u64;
        (s, o)
    }

    #[test]
    fn calls_after_the_turn_ended_are_named_with_their_times() {
        // 2.0 + 0.5 = 2.5 s: in the turn; 2.9 + 0.5 = 3.4 s: +0.4 s after it.
        let (s, o) = run(&[2.0, 2.9, 3.6, 4.5]);
        let c = check(&s, &o).unwrap();
        assert_eq!(
            c.violations(),
            ["the subagent called the provider 3 times after the parent's turn ended: +0.4 s, +1.1 s, +2.0 s"],
            "{c:?}"
        );
        assert_eq!(c.invariant, Invariant::ProviderCalls);
    }

    /// `run(sub)` with the subagent's calls ending at `ended` (provider clock).
    fn ending(sub: &[f64], ended: &[Option<f64>]) -> Check {
        let (s, mut o) = run(sub);
        let subagent = o
            .recording
            .requests
            .iter_mut()
            .filter(|r| r.kind == CallKind::Subagent);
        for (r, e) in subagent.zip(ended) {
            r.ended = *e;
        }
        check(&s, &o).unwrap()
    }

    #[test]
    fn a_call_left_open_after_the_turn_ended_fails() {
        // Made at 1.0 + 0.5 s, in the turn (ended 3.0 s); closed at 5.5 + 0.5 = 6.0 s.
        let c = ending(&[1.0], &[Some(5.5)]);
        assert_eq!(
            c.violations(),
            ["1 model call the subagent made during the parent's turn was still open after that turn \
              ended, closing only +3.0 s after it (the grace is 1 s): the subagent was left inside its call"],
            "{c:?}"
        );
        assert_eq!(c.invariant, Invariant::ProviderCalls);
    }

    #[test]
    fn a_call_closed_with_the_turn_or_within_the_grace_passes() {
        // Closed at 2.9 s (before the end), at 3.9 s (+0.9 s), or not known.
        for ended in [Some(2.4), Some(3.4), None] {
            let c = ending(&[1.0], &[ended]);
            assert_eq!(c.status, super::super::Status::Pass, "{ended:?}: {c:?}");
        }
    }

    #[test]
    fn a_late_call_is_named_once_not_also_as_left_open() {
        // Made at +0.5 s after the turn and open long after: a late call.
        let c = ending(&[3.0], &[Some(9.0)]);
        assert_eq!(c.violations().len(), 1, "{c:?}");
        assert!(
            c.violations()[0].contains("called the provider 1 time"),
            "{c:?}"
        );
    }

    #[test]
    fn calls_within_the_turn_pass() {
        // 2.4 s on the provider's clock is 2.9 s on the run's: before the end.
        let (s, o) = run(&[1.0, 2.4]);
        assert_eq!(check(&s, &o).unwrap().status, super::super::Status::Pass);
    }

    #[test]
    fn a_row_without_a_subagent_has_no_such_check() {
        let s = scenario("expect: error");
        assert!(check(&s, &healthy(&s, end(0, false, true, "err"))).is_none());
    }

    #[test]
    fn not_checked_when_the_turn_never_ended_or_calls_are_hidden() {
        let (s, mut o) = run(&[1.0]);
        o.events
            .retain(|t| !matches!(&t.event, crate::observe::Event::TurnEnd(e) if e.i == 0));
        assert!(check(&s, &o)
            .unwrap()
            .not_checked_reason()
            .unwrap()
            .contains("never ended"));

        let (s, mut o) = run(&[1.0]);
        o.recording.subagent_calls = 5;
        let c = check(&s, &o).unwrap();
        assert!(
            c.not_checked_reason()
                .unwrap()
                .contains("4 of the subagent's 5 calls"),
            "{c:?}"
        );
        // What was kept still convicts.
        let (s, mut o) = run(&[1.0, 4.0]);
        o.recording.subagent_calls = 5;
        assert!(check(&s, &o).unwrap().failed());

        let (s, o) = run(&[]);
        assert!(check(&s, &o).unwrap().not_checked());
    }

    #[test]
    fn a_later_turn_may_start_its_own_subagent() {
        // A chaos run: turn 1 (3.1 s to 6.0 s) is a working turn, turn 2 the probe.
        let (s, mut o) = run(&[3.0, 6.0]);
        o.probe_turn = 2;
        set_turn_end_time(&mut o, 1, 6.0);
        let c = check(&s, &o).unwrap();
        assert_eq!(
            c.violations(),
            ["the subagent called the provider 1 time after the parent's turn ended: +0.5 s"],
            "3.5 s is in turn 1; 6.5 s is after it: {c:?}"
        );
    }
}
