//! ACP drive: `tool_calls_reported`. The faulted turn's tool calls the model
//! issued (the provider's replies: [`Recording::issued_tool_calls`]) were
//! each reported to the client: the turn's `session/update`s name at least
//! as many tool calls (`tool_call`, `tool_call_update`: the drive's
//! [`Event::ToolStatus`]) as the model asked for. An agent that runs (or
//! fails) a tool without a `tool_call` update leaves the editor showing
//! nothing (codex-acp 0.16.0 in read-only mode without bwrap). Counted, not
//! matched by id: an agent names its tool calls itself. Judged only under
//! [`TurnModel::ACP`]; `not checked` when the model issued no tool call,
//! when the turn never ended or was cancelled (a call cut before the agent
//! took it need not be shown), when the row's subagent issued calls (a
//! subagent's tools are reported as the agent chooses), when a kill
//! restarted the agent, on a `chaos:` row (its calls span many turns), or when events were dropped past the cap.
//!
//! [`Recording::issued_tool_calls`]: crate::provider::recording::Recording
//! [`TurnModel::ACP`]: crate::observe::TurnModel

use std::collections::BTreeSet;

use super::{Check, Invariant};
use crate::observe::{Event, Observation};
use crate::scenarios::Scenario;

pub const NAME: &str = "tool_calls_reported";

/// Why the faulted turn's reports cannot be counted, if so.
fn unjudged(s: &Scenario, obs: &Observation) -> Option<String> {
    if obs.capped.events_dropped > 0 {
        return Some(format!(
            "{} events were dropped past the cap, so a report may be among them",
            obs.capped.events_dropped
        ));
    }
    if obs.recording.issued_tool_calls.is_empty() {
        return Some("the model issued no tool call in the faulted turn: nothing to report".into());
    }
    if s.responder.iter().any(|r| r.when.subagent == Some(true)) {
        return Some(
            "the row's subagent issued tool calls, which the agent reports as it chooses".into(),
        );
    }
    if s.chaos.is_some() {
        return Some(
            "a chaos run's issued tool calls span its turns and kills, not one turn".into(),
        );
    }
    if s.process_fault.is_some() {
        return Some(
            "a process fault cut the faulted turn: its reports died with the process".into(),
        );
    }
    match obs.turn_end(0) {
        None => Some("the faulted turn never ended".into()),
        Some((_, end)) if end.interrupted => Some(
            "the faulted turn was cancelled: a tool call cut before the agent took it need not be shown".into(),
        ),
        Some(_) => None,
    }
}

pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    if !super::acp_settled::is_acp(obs) {
        return None;
    }
    let inv = Invariant::ProcessHygiene;
    if let Some(why) = unjudged(s, obs) {
        return Some(Check::skipped(inv, NAME, why));
    }
    let issued = obs.recording.issued_tool_calls.len();
    let reported: BTreeSet<&str> = obs
        .events
        .iter()
        .filter_map(|t| match &t.event {
            Event::ToolStatus { turn: 0, id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    let v = if reported.len() < issued {
        vec![format!(
            "the model issued {issued} tool call(s) in the faulted turn and the agent reported {} to the client by `tool_call` updates: every tool call it runs or refuses must be shown (pending, then completed, failed or cancelled)",
            reported.len()
        )]
    } else {
        vec![]
    };
    Some(Check::new(inv, NAME, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::fixtures::*;
    use crate::provider::recording::IssuedToolCall;

    fn issued(obs: &mut Observation, n: usize) {
        for i in 0..n {
            obs.recording.issued_tool_calls.push(IssuedToolCall {
                id: format!("call_{i}"),
                tool: "shell".into(),
                args: serde_json::json!({"command": "exit 3"}),
                main_index: 0,
            });
        }
    }

    #[test]
    fn a_tool_call_never_reported_fails_one_reported_passes() {
        let s = scenario("expect: ended");
        let mut o = acp(&s, acp_end_turn("done"), vec![]);
        issued(&mut o, 1);
        let c = check(&s, &o).expect("judged under ACP");
        assert!(c.violations()[0].contains("issued 1 tool call(s)"), "{c:?}");
        assert!(c.violations()[0].contains("reported 0"), "{c:?}");
        // The agent's own id, reported pending then failed: one call shown.
        let mut o = acp(
            &s,
            acp_end_turn("done"),
            vec![
                tool_status(1.0, 0, "toolu_9", "pending"),
                tool_status(1.1, 0, "toolu_9", "failed"),
            ],
        );
        issued(&mut o, 1);
        let c = check(&s, &o).unwrap();
        assert!(!c.failed() && !c.not_checked(), "{c:?}");
        // A report in another turn does not count for the faulted one.
        let mut o = acp(
            &s,
            acp_end_turn("done"),
            vec![tool_status(5.0, 1, "t", "completed")],
        );
        issued(&mut o, 1);
        assert!(check(&s, &o).unwrap().failed());
    }

    #[test]
    fn nothing_issued_a_cancelled_turn_or_another_drive_is_not_judged() {
        let s = scenario("expect: ended");
        let o = acp(&s, acp_end_turn("done"), vec![]);
        assert!(check(&s, &o).unwrap().not_checked());
        let mut o = acp(&s, end_interrupted(0), vec![]);
        issued(&mut o, 1);
        assert!(check(&s, &o).unwrap().not_checked());
        let mut o = healthy(&s, end(0, true, false, "done"));
        issued(&mut o, 1);
        assert!(check(&s, &o).is_none());
        // A chaos run: its issued calls span every turn (chaos_soak over ACP).
        let chaos = scenario("expect: survives\nchaos: {turns: 2, duration: 5, min_faults: 1}");
        let mut o = acp(
            &chaos,
            acp_end_turn("done"),
            vec![tool_status(1.0, 0, "a", "completed")],
        );
        issued(&mut o, 5);
        assert!(check(&chaos, &o).unwrap().not_checked());
    }
}
