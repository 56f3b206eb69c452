//! A row run in part (`schedule_ran`): calls its replies ask for that the
//! profile cannot make were dropped before the run (a `background: true`
//! call for a tool that maps no `background` argument, beside calls it can
//! make: [`crate::profile::needs::adapt`]). What ran is judged as usual;
//! what was dropped could not be checked, so the row says the share of its
//! scheduled tool calls that ran, as `not checked` with the profile's gap,
//! never as a pass. No check for a row run as written.

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::scenarios::Scenario;

/// The check's name.
pub const NAME: &str = "schedule_ran";

/// `schedule_ran` for a row whose calls were dropped: `N of M tool calls
/// its replies scheduled ran; K dropped: why`, counted over the main calls
/// each rule answered.
pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    let first = s.dropped_calls.first()?;
    let hits = |i: usize| match obs.recording.rule_hits.get(i) {
        Some(n) => *n as usize,
        None => obs
            .recording
            .main_requests()
            .filter(|r| r.rule == Some(i))
            .count(),
    };
    let (mut ran, mut dropped) = (0, 0);
    for (i, rule) in s.responder.iter().enumerate() {
        let cut = s
            .dropped_calls
            .iter()
            .filter(|d| d.rule == i)
            .map(|d| d.count)
            .sum::<usize>();
        ran += hits(i) * rule.reply.tool_calls().len();
        dropped += hits(i) * cut;
    }
    let reason = format!(
        "part of the row did not run: {ran} of {} tool calls its replies scheduled ran; {dropped} dropped ({} per reply of {} rule(s)): {}; map it to run the whole row",
        ran + dropped,
        s.dropped_calls.iter().map(|d| d.count).sum::<usize>(),
        s.dropped_calls.len(),
        first.why
    );
    Some(Check::skipped(Invariant::Exercised, NAME, reason))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::scenarios::schema::DroppedCalls;

    /// A row whose background call was dropped says the share that ran,
    /// over the calls its rules answered, and the gap; the same row run
    /// as written has no such check.
    #[test]
    fn a_row_with_dropped_calls_says_the_share_that_ran() {
        let table = "scenarios:\n  - id: s\n    responder:\n      - when: {after_tool: false}\n        reply: {kind: tool_call, calls: [{tool: shell, args: {command: a}}]}\n      - reply: {kind: text, text: done}\n    expect: ended\n";
        let mut s = crate::scenarios::load_str(table, "t.yaml")
            .unwrap()
            .scenarios
            .remove(0);
        let o = {
            let mut o = healthy(&s, end(0, true, false, "done"));
            o.recording.rule_hits = vec![10, 10];
            o
        };
        assert!(check(&s, &o).is_none());
        s.dropped_calls.push(DroppedCalls {
            rule: 0,
            count: 1,
            why: "the profile's `tools.shell` (the agent's `bash`) maps no `background` argument"
                .into(),
        });
        let c = check(&s, &o).expect("a check");
        assert_eq!(
            c.not_checked_reason(),
            Some("part of the row did not run: 10 of 20 tool calls its replies scheduled ran; 10 dropped (1 per reply of 1 rule(s)): the profile's `tools.shell` (the agent's `bash`) maps no `background` argument; map it to run the whole row")
        );
    }
}
