//! Wrong give-ups (bounded termination / `gave_up_with_retries_left`): a
//! scenario that expects an answer, whose faulted turn ended without one
//! right after retryable faults, while the agent still had retries left
//! (`api_max_retries` not used up on that request) and the next call would
//! have answered (the fault had cleared). Pure over the scenario and the
//! recorded calls; `not checked` when the calls it needs were not kept.

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::provider::rules;
use crate::scenarios::{Expect, Scenario};

const NAME: &str = "gave_up_with_retries_left";

pub fn check(s: &Scenario, obs: &Observation) -> Vec<Check> {
    let inv = Invariant::Termination;
    if !matches!(s.expect, Expect::Answer(_)) || s.process_fault.is_some() {
        return vec![];
    }
    let Some((_, end)) = obs.turn_end(0) else {
        return vec![];
    };
    if end.completed || end.interrupted {
        return vec![Check::new(inv, NAME, vec![])];
    }
    let rec = &obs.recording;
    let mut main: Vec<_> = rec.main_requests().collect();
    main.sort_by_key(|r| r.main_index);
    if rec.requests_dropped > 0 || main.len() as u64 != rec.main_calls || main.is_empty() {
        return vec![Check::skipped(
            inv,
            NAME,
            "not every provider call of the faulted turn was kept",
        )];
    }
    let is_fault = |r: &&crate::provider::recording::RequestRecord| {
        r.rule
            .and_then(|i| s.responder.get(i))
            .is_some_and(|rule| rule.reply.retryable())
    };
    let failed = main.iter().rev().take_while(|r| is_fault(r)).count() as u64;
    if failed == 0 {
        return vec![Check::skipped(
            inv,
            NAME,
            "the turn's last call was not a retryable fault",
        )];
    }
    let last = main.last().expect("not empty");
    let after_tool = crate::message::after_tool(&last.messages);
    let next = rec.main_calls;
    let call = rules::Call {
        index: next,
        after_tool,
        seed: obs.rule_seed,
        ..rules::Call::default()
    };
    let cleared = rules::pick(&s.responder, &call).is_none_or(|(_, r)| !r.reply.retryable());
    let retries = u64::from(s.knobs.api_max_retries);
    let used = failed - 1;
    if !cleared || used >= retries || next >= s.calls.limit() {
        return vec![Check::new(inv, NAME, vec![])];
    }
    let kinds: Vec<&str> = main
        .iter()
        .rev()
        .take(failed as usize)
        .rev()
        .map(|r| r.reply.as_str())
        .collect();
    vec![Check::new(
        inv,
        NAME,
        vec![format!(
            "gave up with {} retries left: the last request failed {failed} time(s) ({}), \
             api_max_retries is {retries}, and call {next} would have answered (the fault had cleared); \
             the turn ended failed={} final={:?}",
            retries - used,
            kinds.join(", "),
            end.failed,
            super::clip(&end.final_text, 120)
        )],
    )]
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::provider::recording::CallKind;

    fn row() -> Scenario {
        scenario(
            "knobs: {api_max_retries: 2}\n\
             expect: {answer: done}\n",
        )
    }

    fn scen() -> Scenario {
        let mut s = row();
        s.responder = serde_yaml::from_str(
            "- {when: {call: 0}, reply: {kind: error, status: 500}}\n\
             - {when: {call: 1}, reply: {kind: error, status: 429}}\n\
             - {reply: {kind: text, text: done}}\n",
        )
        .unwrap();
        s
    }

    fn gave_up_after(s: &Scenario, calls: u64) -> Observation {
        let mut o = healthy(s, end(0, false, true, "provider error: HTTP 500"));
        o.recording.requests = (0..calls)
            .map(|i| {
                let mut r = request(i, CallKind::Main, vec![msg("user", "task")]);
                r.rule = Some(i.min(2) as usize);
                r.reply = if i < 2 { "error" } else { "text" }.into();
                r
            })
            .collect();
        o.recording.main_calls = calls;
        o
    }

    #[test]
    fn giving_up_with_retries_left_after_the_fault_cleared_is_named() {
        let s = scen();
        // After two faults (500, 429), with 2 retries: one was left, and
        // call 2 would have answered.
        let c = check(&s, &gave_up_after(&s, 2));
        assert!(c[0].failed(), "{c:?}");
        let v = &c[0].violations()[0];
        assert!(v.starts_with("gave up with 1 retries left"), "{v}");
        assert!(v.contains("(error, error)"), "{v}");
        // After one fault, while call 1 would still fault: not a wrong give-up
        // by this check (the fault had not cleared).
        assert!(!check(&s, &gave_up_after(&s, 1))[0].failed());
        let mut one = scen();
        one.responder.remove(1);
        let c = check(&one, &gave_up_after(&one, 1));
        assert!(
            c[0].violations()[0].starts_with("gave up with 2 retries left"),
            "{c:?}"
        );
    }

    #[test]
    fn a_give_up_after_every_retry_or_before_the_fault_clears_is_not() {
        let mut s = scen();
        s.knobs.api_max_retries = 1;
        assert!(!check(&s, &gave_up_after(&s, 2))[0].failed());
        let mut s = scen();
        s.responder = serde_yaml::from_str("- {reply: {kind: error, status: 500}}\n").unwrap();
        let mut o = gave_up_after(&s, 1);
        o.recording.requests[0].rule = Some(0);
        assert!(!check(&s, &o)[0].failed());
        // A 400 is not retryable: giving up on it is right.
        let mut s = scen();
        s.responder = serde_yaml::from_str(
            "- {when: {call: 0}, reply: {kind: error, status: 400}}\n- {reply: {kind: text, text: done}}\n",
        )
        .unwrap();
        let c = check(&s, &gave_up_after(&s, 1));
        assert!(c[0].not_checked(), "{c:?}");
        // An answer, or a row not expecting one, is no give-up.
        let s = scen();
        let ok = healthy(&s, end(0, true, false, "done"));
        assert!(!check(&s, &ok)[0].failed());
        let mut s = scen();
        s.expect = Expect::Error;
        assert!(check(&s, &gave_up_after(&s, 1)).is_empty());
    }

    #[test]
    fn calls_not_kept_make_it_not_checked() {
        let s = scen();
        let mut o = gave_up_after(&s, 2);
        o.recording.requests_dropped = 1;
        assert!(check(&s, &o)[0].not_checked());
    }
}
