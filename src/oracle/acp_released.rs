//! ACP drive: `terminals_released`. A terminal the agent created on the
//! client's side (`terminal/create` answered) must be released
//! (`terminal/release`) by the end of the turn that created it: an editor
//! keeps an unreleased terminal's process and output until the session ends
//! (ACP: "the agent MUST release the terminal"). Pure over the drive's
//! `client_call` events, counted per turn (the drive records each with the
//! turn its request came in, so a release answered after the turn's end
//! still counts); only turns that ended are judged (a turn that never ended
//! is bounded termination's). Made only under [`TurnModel::ACP`] when the
//! agent created a terminal; `not checked` on a row whose client rules fault
//! `terminal/*` when none was created (the fault never landed).
//!
//! [`TurnModel::ACP`]: crate::observe::TurnModel::ACP

use std::collections::BTreeMap;

use super::acp_settled::is_acp;
use super::{Check, Invariant};
use crate::observe::{Event, Observation};
use crate::scenarios::Scenario;

pub const NAME: &str = "terminals_released";

/// Per turn: (terminals created, releases asked).
fn counts(obs: &Observation) -> (BTreeMap<u64, (u64, u64)>, Vec<u64>) {
    let mut per = BTreeMap::<u64, (u64, u64)>::new();
    let mut ended = Vec::new();
    for t in &obs.events {
        match &t.event {
            Event::ClientCall {
                turn: Some(turn),
                method,
                outcome,
            } => {
                let c = per.entry(*turn).or_default();
                if method == "terminal/create" && outcome == "ok" {
                    c.0 += 1;
                } else if method == "terminal/release" {
                    c.1 += 1;
                }
            }
            Event::TurnEnd(end) => ended.push(end.i),
            _ => {}
        }
    }
    (per, ended)
}

pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    if !is_acp(obs) {
        return None;
    }
    let inv = Invariant::ProcessHygiene;
    let (per, ended) = counts(obs);
    if per.values().all(|c| c.0 == 0) {
        let faults_terminals = s
            .client
            .iter()
            .any(|r| r.when.method.starts_with("terminal/"));
        return faults_terminals.then(|| {
            Check::skipped(
                inv,
                NAME,
                "the agent created no terminal on the client's side, so the row's terminal fault never landed",
            )
        });
    }
    let v = per
        .iter()
        .filter(|(turn, (created, released))| ended.contains(turn) && created > released)
        .map(|(turn, (created, released))| {
            format!(
                "turn {turn} created {created} terminal(s) on the client's side and released {released} by its end: an unreleased terminal keeps its process and output in the editor until the session ends"
            )
        })
        .collect();
    Some(Check::new(inv, NAME, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::fixtures::{acp, acp_end_turn, at, scenario};

    fn call(method: &str, outcome: &str) -> Event {
        Event::ClientCall {
            turn: Some(0),
            method: method.into(),
            outcome: outcome.into(),
        }
    }

    #[test]
    fn a_terminal_released_in_its_turn_passes_one_left_fails() {
        let s = scenario("expect: ended");
        let created = at(1.0, call("terminal/create", "ok"));
        let released = at(2.0, call("terminal/release", "ok"));
        let ok = acp(&s, acp_end_turn("ran"), vec![created.clone(), released]);
        let c = check(&s, &ok).expect("made: a terminal was created");
        assert!(c.violations().is_empty() && !c.not_checked(), "{c:?}");
        let left = acp(&s, acp_end_turn("ran"), vec![created]);
        let c = check(&s, &left).unwrap();
        assert!(c.violations()[0].contains("released 0"), "{c:?}");
    }

    #[test]
    fn omitted_without_terminals_not_checked_when_a_terminal_fault_never_landed() {
        let plain = scenario("expect: ended");
        assert!(check(&plain, &acp(&plain, acp_end_turn("x"), vec![])).is_none());
        let s = scenario(
            "expect: ended\nclient: [{when: {method: terminal/wait_for_exit}, reply: {kind: never}}]",
        );
        let c = check(&s, &acp(&s, acp_end_turn("x"), vec![])).unwrap();
        assert!(c.not_checked(), "{c:?}");
    }
}
