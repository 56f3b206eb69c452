//! ACP drive: `pending_request_settled`. A `session/request_permission` a
//! row's client fault left unanswered (`never`) is answered `cancelled` by
//! chaosrun when it cancels the turn, as the protocol says the client does;
//! the agent must then end that turn `cancelled` within the interrupt
//! deadline, not keep waiting on the request (an editor shows such a session
//! stuck in "Cancelling" forever). Made only under [`TurnModel::ACP`] and for
//! rows with `client:` rules; `not checked` when no permission request was
//! left pending (the fault never landed), or no cancel was sent while one
//! was. The turn's own end and the probe behind it are this check's cause
//! when it fails ([`super::depends`]).
//!
//! [`TurnModel::ACP`]: crate::observe::TurnModel::ACP

use super::acp_settled::is_acp;
use super::{Check, Invariant};
use crate::observe::{Event, Observation, CLIENT_HELD, CLIENT_SETTLED_AT_CANCEL};
use crate::scenarios::Scenario;

pub const NAME: &str = "pending_request_settled";

const PERMISSION: &str = "session/request_permission";

/// What the events show of the first turn whose permission request was
/// held: (turn, when chaosrun settled it, when and how the turn ended).
struct Pending {
    turn: Option<u64>,
    settled_at: Option<f64>,
    end: Option<(f64, bool, String)>,
}

fn pending(obs: &Observation) -> Option<Pending> {
    let mut p: Option<Pending> = None;
    for t in &obs.events {
        match (&t.event, p.as_mut()) {
            (
                Event::ClientCall {
                    turn,
                    method,
                    outcome,
                },
                None,
            ) if method == PERMISSION && outcome == CLIENT_HELD => {
                p = Some(Pending {
                    turn: *turn,
                    settled_at: None,
                    end: None,
                });
            }
            (
                Event::ClientCall {
                    turn,
                    method,
                    outcome,
                },
                Some(p),
            ) if method == PERMISSION
                && outcome == CLIENT_SETTLED_AT_CANCEL
                && *turn == p.turn
                && p.settled_at.is_none() =>
            {
                p.settled_at = Some(t.at);
            }
            (Event::TurnEnd(end), Some(p)) if Some(end.i) == p.turn && p.end.is_none() => {
                p.end = Some((t.at, end.interrupted, end.exit_reason.clone()));
            }
            _ => {}
        }
    }
    p
}

pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    if !is_acp(obs) || s.client.is_empty() {
        return None;
    }
    let inv = Invariant::Termination;
    let Some(p) = pending(obs) else {
        return Some(Check::skipped(
            inv,
            NAME,
            "no session/request_permission was left pending (the agent asked none the row's client rules hold)",
        ));
    };
    let turn = p
        .turn
        .map_or("between turns".into(), |t| format!("turn {t}"));
    let Some(settled) = p.settled_at else {
        return Some(Check::skipped(
            inv,
            NAME,
            format!("no cancel was sent while {turn}'s permission request was pending"),
        ));
    };
    let deadline = s.deadlines.interrupt;
    let v = match p.end {
        None => vec![format!(
            "{turn} never ended after chaosrun answered its pending session/request_permission `cancelled`: the agent kept waiting on the request (the protocol's client answers it `cancelled` at a cancel; the agent must then end the turn `cancelled`)"
        )],
        Some((at, _, _)) if at - settled > deadline => vec![format!(
            "{turn} ended {:.1} s after chaosrun answered its pending session/request_permission `cancelled`, past the {deadline:.0} s interrupt deadline",
            at - settled
        )],
        Some((_, false, reason)) => vec![format!(
            "{turn} ended with stopReason {reason} after its pending session/request_permission was answered `cancelled`: a cancelled turn ends `cancelled`"
        )],
        Some(_) => vec![],
    };
    Some(Check::new(inv, NAME, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::fixtures::{acp, acp_cancelled, acp_end_turn, at, scenario};

    fn call(turn: u64, outcome: &str) -> Event {
        Event::ClientCall {
            turn: Some(turn),
            method: PERMISSION.into(),
            outcome: outcome.into(),
        }
    }

    /// Turn 0 held a permission request at 1 s; `settle`: chaosrun settled
    /// it at 2 s; `end`: turn 0's end and when.
    fn judge(settle: bool, end: Option<(f64, bool)>) -> Check {
        let s = scenario(
            "expect: interrupted\ninterrupt: {after_calls: 1}\nclient: [{when: {method: session/request_permission}, reply: {kind: never}}]",
        );
        let mut obs = acp(&s, acp_cancelled(), vec![]);
        obs.events
            .retain(|t| !matches!(&t.event, Event::TurnEnd(e) if e.i == 0));
        let mut extra = vec![at(1.0, call(0, CLIENT_HELD))];
        if settle {
            extra.push(at(2.0, call(0, CLIENT_SETTLED_AT_CANCEL)));
        }
        if let Some((t, cancelled)) = end {
            let e = if cancelled {
                acp_cancelled()
            } else {
                acp_end_turn("ran")
            };
            extra.push(at(t, Event::TurnEnd(e)));
        }
        obs.events.extend(extra);
        obs.events.sort_by(|a, b| a.at.total_cmp(&b.at));
        check(&s, &obs).expect("made under ACP with client rules")
    }

    #[test]
    fn a_turn_ended_cancelled_after_the_settle_passes_one_left_waiting_fails() {
        let ok = judge(true, Some((2.1, true)));
        assert!(ok.violations().is_empty() && !ok.not_checked(), "{ok:?}");
        let stuck = judge(true, None);
        assert!(stuck.violations()[0].contains("never ended"), "{stuck:?}");
        let late = judge(true, Some((600.0, true)));
        assert!(late.violations()[0].contains("past the"), "{late:?}");
        let ran = judge(true, Some((2.5, false)));
        assert!(ran.violations()[0].contains("end_turn"), "{ran:?}");
        assert!(judge(false, Some((2.5, true))).not_checked(), "no cancel");
    }

    #[test]
    fn omitted_without_client_rules_not_checked_when_nothing_was_held() {
        let plain = scenario("expect: error");
        assert!(check(&plain, &acp(&plain, acp_cancelled(), vec![])).is_none());
        let s = scenario(
            "expect: error\nclient: [{when: {method: fs/read_text_file}, reply: {kind: never}}]",
        );
        let c = check(&s, &acp(&s, acp_cancelled(), vec![])).unwrap();
        assert!(c.not_checked(), "{c:?}");
    }
}
