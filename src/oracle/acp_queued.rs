//! ACP drive: `queued_prompt_answered`. A row with `queue_prompt` sends the
//! probe's `session/prompt` while the faulted turn still runs (a message the
//! user queued); the agent must answer it on its own (its answer carries the
//! probe's nonce) or refuse it explicitly (a JSON-RPC error), never leave it
//! unanswered nor answer it with the turn before's answer (copilot-cli
//! #3184). Made only under [`TurnModel::ACP`] for rows with `queue_prompt`;
//! `not checked` when the queued prompt was never sent (the faulted turn had
//! ended first). When it fails it is the probe's cause ([`super::depends`]).
//!
//! [`TurnModel::ACP`]: crate::observe::TurnModel::ACP

use super::acp_settled::is_acp;
use super::{clip, Check, Invariant};
use crate::observe::{Event, Observation, ACP_PROMPT_ERROR};
use crate::scenarios::Scenario;

pub const NAME: &str = "queued_prompt_answered";

pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    if !is_acp(obs) || s.queue_prompt.is_none() {
        return None;
    }
    let inv = Invariant::Reusability;
    let queued = obs.find(|e| match e {
        Event::PromptQueued { turn } => Some(*turn),
        _ => None,
    });
    let Some((_, turn)) = queued else {
        return Some(Check::skipped(
            inv,
            NAME,
            "the queued prompt was never sent: the faulted turn had ended (or never began) before `queue_prompt.after_seconds`",
        ));
    };
    let v = match obs.turn_end(turn) {
        None => vec![format!(
            "the prompt sent while turn {} ran (turn {turn}) was never answered nor refused: the queued message was lost",
            turn.saturating_sub(1)
        )],
        Some((_, end)) if end.exit_reason == ACP_PROMPT_ERROR => vec![],
        Some((_, end)) if end.final_text.contains(&format!("alive {}", obs.nonce)) => vec![],
        Some((_, end)) => {
            let before = obs.turn_end(turn.saturating_sub(1)).map(|(_, e)| e.final_text);
            let said = clip(&end.final_text, 200);
            if !end.final_text.is_empty() && before.as_deref() == Some(end.final_text.as_str()) {
                vec![format!("the queued prompt (turn {turn}) was answered with the turn before's answer: {said:?}")]
            } else {
                vec![format!("the queued prompt (turn {turn}) got no answer of its own (no `alive {}`): stopReason {}, {said:?}", obs.nonce, end.exit_reason)]
            }
        }
    };
    Some(Check::new(inv, NAME, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::TurnEnd;
    use crate::oracle::fixtures::{acp, acp_end_turn, at, scenario};

    fn row() -> Scenario {
        scenario("queue_prompt: {after_seconds: 1}\nexpect: ended")
    }

    fn queued() -> crate::observe::Timed {
        at(1.0, Event::PromptQueued { turn: 1 })
    }

    fn without_probe_end(obs: &mut Observation) {
        obs.events
            .retain(|t| !matches!(&t.event, Event::TurnEnd(e) if e.i == 1));
    }

    fn set_probe(obs: &mut Observation, f: impl Fn(&mut TurnEnd)) {
        for t in &mut obs.events {
            if let Event::TurnEnd(e) = &mut t.event {
                if e.i == 1 {
                    f(e);
                }
            }
        }
    }

    #[test]
    fn an_answered_queued_prompt_passes() {
        let obs = acp(&row(), acp_end_turn("done"), vec![queued()]);
        let c = check(&row(), &obs).unwrap();
        assert!(c.status == crate::oracle::Status::Pass, "{c:?}");
    }

    #[test]
    fn a_refused_queued_prompt_passes() {
        let mut obs = acp(&row(), acp_end_turn("done"), vec![queued()]);
        set_probe(&mut obs, |e| {
            (e.exit_reason, e.final_text) = (ACP_PROMPT_ERROR.into(), "busy".into());
        });
        let c = check(&row(), &obs).unwrap();
        assert!(c.status == crate::oracle::Status::Pass, "{c:?}");
    }

    #[test]
    fn a_lost_queued_prompt_fails() {
        let mut obs = acp(&row(), acp_end_turn("done"), vec![queued()]);
        without_probe_end(&mut obs);
        let c = check(&row(), &obs).unwrap();
        assert!(c.failed(), "{c:?}");
        assert!(c.violations()[0].contains("was lost"), "{c:?}");
    }

    #[test]
    fn the_turn_befores_answer_fails() {
        let mut obs = acp(&row(), acp_end_turn("done"), vec![queued()]);
        set_probe(&mut obs, |e| e.final_text = "done".into());
        let c = check(&row(), &obs).unwrap();
        assert!(c.violations()[0].contains("turn before's answer"), "{c:?}");
    }

    #[test]
    fn never_sent_is_not_checked_and_other_rows_are_not_judged() {
        let obs = acp(&row(), acp_end_turn("done"), vec![]);
        assert!(check(&row(), &obs).unwrap().not_checked());
        let plain = scenario("expect: ended");
        let obs = acp(&plain, acp_end_turn("done"), vec![queued()]);
        assert!(check(&plain, &obs).is_none());
    }
}
