//! Bounded provider calls: the faulted turn made at least one main call (none
//! needed when `interrupt` went out before the first) and no more than its
//! bound (or exactly the number asked), and at most
//! `max_calls_after_interrupt` after `interrupt` was sent.

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::scenarios::{CallBound, Scenario};

/// `interrupt` went out before the faulted turn's first main call (a row
/// that cancels with the prompt, `interrupt: {after_seconds: 0}`): a turn
/// cancelled before it called the provider may end without calling it.
fn interrupted_before_any_call(obs: &Observation) -> bool {
    obs.interrupt_sent().is_some_and(|(_, before)| before == 0)
}

/// Rows with `subagent: true` rules: the subagent's calls (counted apart from
/// the parent's) within the row's call bound: a subagent that loops is cut.
pub fn subagent(s: &Scenario, obs: &Observation) -> Option<Check> {
    if !s.responder.iter().any(|r| r.when.subagent == Some(true)) {
        return None;
    }
    let n = obs.recording.subagent_calls;
    let limit = s.calls.limit();
    let v = if n > limit {
        vec![format!(
            "the subagent made {n} provider calls; the bound is {limit}: its loop was never cut"
        )]
    } else {
        vec![]
    };
    Some(Check::new(
        Invariant::ProviderCalls,
        "subagent_call_bound",
        v,
    ))
}

pub fn check(s: &Scenario, obs: &Observation) -> Vec<Check> {
    let inv = Invariant::ProviderCalls;
    let n = obs.recording.main_calls;
    let turn_ended = obs.turn_end(0).is_some();
    let mut out = Vec::new();
    if s.chaos.is_some() {
        // The bound is per turn: each turn, and each turn a kill cut short and
        // the resumed agent ran again, may use it.
        let (kills, _) = obs.faults_landed();
        let limit = s.calls.limit() * (obs.probe_turn + kills as u64);
        let v = if n > limit {
            vec![format!(
                "{n} provider calls over {} turns and {kills} kills; the bound is {} per turn ({limit})",
                obs.probe_turn,
                s.calls.limit()
            )]
        } else {
            vec![]
        };
        out.push(Check::new(inv, "call_bound", v));
        return out;
    }
    // After a kill, the restarted agent (or, in worker mode, the worker that
    // takes the turn over) works on the faulted turn again: each incarnation
    // may use the bound.
    let lives = if matches!(s.expect, crate::scenarios::Expect::Killed) {
        1 + obs.faults_landed().0 as u64
    } else {
        1
    };
    let calls = match s.calls {
        CallBound::Max(m) => CallBound::Max(m * lives),
        exact => exact,
    };
    let bound = match calls {
        CallBound::Max(max) if n > max => Check::new(
            inv,
            "call_bound",
            vec![if lives > 1 {
                format!(
                    "the faulted turn made {n} provider calls; the bound is {} per life, {max} over its {lives}",
                    max / lives
                )
            } else {
                format!("the faulted turn made {n} provider calls; the bound is {max}")
            }],
        ),
        CallBound::Max(_) if n == 0 && turn_ended && interrupted_before_any_call(obs) => {
            Check::new(inv, "call_bound", vec![])
        }
        CallBound::Max(_) if n == 0 && turn_ended => Check::new(
            inv,
            "call_bound",
            vec!["the faulted turn ended without calling the provider".into()],
        ),
        CallBound::Max(_) if n == 0 => {
            Check::skipped(inv, "call_bound", "the agent never called the provider")
        }
        CallBound::Exactly(want) if n > want || (turn_ended && n != want) => Check::new(
            inv,
            "call_bound",
            vec![format!(
                "the faulted turn made {n} provider calls; exactly {want} expected"
            )],
        ),
        CallBound::Exactly(_) if !turn_ended => Check::skipped(
            inv,
            "call_bound",
            "the faulted turn never ended, so its final call count is unknown",
        ),
        _ => Check::new(inv, "call_bound", vec![]),
    };
    out.push(bound);
    if let Some((_, before)) = obs.interrupt_sent() {
        let after = n.saturating_sub(before);
        let max = s.max_calls_after_interrupt;
        let v = if after > max {
            vec![format!(
                "{after} provider calls after `interrupt` (sent after call {before}); at most {max} allowed"
            )]
        } else {
            vec![]
        };
        out.push(Check::new(inv, "calls_after_interrupt", v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::observe::Event;

    fn with_calls(s: &Scenario, n: u64) -> Observation {
        let mut o = healthy(s, end(0, false, true, "err"));
        o.recording.main_calls = n;
        o
    }

    #[test]
    fn within_bound_passes_above_fails() {
        let s = scenario("expect: error\ncalls: {max: 2}");
        assert!(!check(&s, &with_calls(&s, 2))[0].failed());
        let c = check(&s, &with_calls(&s, 3));
        assert!(c[0].violations()[0].contains("made 3 provider calls; the bound is 2"));
    }

    #[test]
    fn zero_calls_in_an_ended_turn_is_a_violation() {
        let s = scenario("expect: error");
        assert!(check(&s, &with_calls(&s, 0))[0].failed());
    }

    #[test]
    fn a_turn_cancelled_before_its_first_call_may_make_none() {
        let s = scenario("expect: interrupted\ninterrupt: {after_seconds: 0}");
        let mut o = with_calls(&s, 0);
        o.events
            .push(at(0.1, Event::InterruptSent { main_calls: 0 }));
        let c = check(&s, &o);
        assert!(!c[0].failed() && !c[0].not_checked(), "{:?}", c[0]);
        // Sent after a call: the turn still had to make one.
        o.events
            .retain(|t| !matches!(t.event, Event::InterruptSent { .. }));
        o.events
            .push(at(0.1, Event::InterruptSent { main_calls: 1 }));
        assert!(check(&s, &o)[0].failed());
    }

    #[test]
    fn exactly_means_exactly() {
        let s = scenario("expect: error\ncalls: {exactly: 1}");
        assert!(!check(&s, &with_calls(&s, 1))[0].failed());
        assert!(check(&s, &with_calls(&s, 2))[0].failed());
        let mut unended = with_calls(&s, 1);
        unended
            .events
            .retain(|t| !matches!(t.event, Event::TurnEnd(_)));
        assert!(check(&s, &unended)[0].not_checked());
    }

    #[test]
    fn a_kill_gives_the_faulted_turn_a_second_life() {
        let s = scenario(
            "expect: killed\nprocess_fault: {action: kill, at: {after_calls: 1}}\ncalls: {max: 4}",
        );
        let mut o = with_calls(&s, 5);
        o.events.push(at(
            1.0,
            Event::ProcessFault {
                action: "kill".into(),
                signalled: 1,
                main_calls: 1,
                start_up: false,
            },
        ));
        assert!(!check(&s, &o)[0].failed(), "5 ≤ 4 per life × 2 lives");
        o.recording.main_calls = 9;
        assert!(check(&s, &o)[0].violations()[0].contains("4 per life, 8 over its 2"));
    }

    #[test]
    fn calls_after_interrupt_are_bounded() {
        let s = scenario("expect: interrupted\ninterrupt: {after_calls: 1}");
        let mut o = with_calls(&s, 3);
        o.events
            .push(at(1.0, Event::InterruptSent { main_calls: 1 }));
        assert!(!check(&s, &o)[1].failed(), "2 after is allowed");
        o.recording.main_calls = 4;
        assert!(check(&s, &o)[1].violations()[0].contains("3 provider calls after `interrupt`"));
    }

    #[test]
    fn the_subagents_calls_are_bounded_apart() {
        use crate::oracle::fixtures::{end, healthy, scenario};
        let mut s = scenario("expect: ended\ncalls: {max: 6}");
        let judge = |s: &Scenario, n| {
            let mut o = healthy(s, end(0, true, false, "done"));
            o.recording.subagent_calls = n;
            subagent(s, &o)
        };
        assert!(judge(&s, 99).is_none(), "a row without subagent rules");
        s.responder =
            serde_yaml::from_str("[{when: {subagent: true}, reply: {kind: hang}}]").unwrap();
        assert!(!judge(&s, 6).unwrap().failed());
        let looped = judge(&s, 40).unwrap();
        assert!(
            looped.violations()[0].contains("the subagent made 40 provider calls"),
            "{looped:?}"
        );
    }
}
