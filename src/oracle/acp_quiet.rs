//! ACP drive: `quiet_after_cancel`. Once the agent has answered a cancelled
//! turn's `session/prompt` (`stopReason: cancelled`), it sends no more work
//! for it: no `session/update` of a work kind (message, thought, tool call,
//! plan; the drive's [`Event::UpdateAfterTurn`]) before the next prompt.
//! The protocol lets an agent send content and tool call updates after
//! `session/cancel` only before it answers the prompt. Session-state updates
//! ([`SESSION_STATE`]: a title, usage, commands, a mode) are not work and
//! are left out, as is what a process restarted after a kill sends (its
//! `session/load` replay). Judged only under [`TurnModel::ACP`] (omitted otherwise,
//! like every drive-specific check); `not checked` when no turn ended
//! cancelled. A tool call update that follows a cancelled turn which left
//! that call unsettled is `tool_calls_settled`'s charge (one cause, one
//! failed check): when nothing else came, this check is `not checked`,
//! naming it.
//!
//! [`TurnModel::ACP`]: crate::observe::TurnModel::ACP

use super::acp_settled::{self, Unsettled};
use super::{clip, unless_partial, Check, Invariant};
use crate::observe::{Event, Observation};

pub const NAME: &str = "quiet_after_cancel";

/// `sessionUpdate` kinds that report the session's state, not a turn's
/// work: they may follow a turn's end.
pub const SESSION_STATE: [&str; 5] = [
    "available_commands_update",
    "current_mode_update",
    "config_option_update",
    "session_info_update",
    "usage_update",
];

/// The kinds a tool call that was left unsettled goes on reporting.
const TOOL_KINDS: [&str; 2] = ["tool_call", "tool_call_update"];

/// Kinds named in a violation, at most.
const LISTED: usize = 8;

/// One cancelled turn's end and the work updates that came after it.
struct AfterCancel {
    turn: u64,
    ended_at: f64,
    /// (time, kind) of each work update after the end, not already charged.
    updates: Vec<(f64, String)>,
    /// Tool updates after the end of a turn that left a call unsettled.
    charged_elsewhere: usize,
}

/// The cancelled turns (ended with `interrupted`) in order, each with what
/// came after its end.
fn after_cancel(obs: &Observation, unsettled: &[Unsettled]) -> Vec<AfterCancel> {
    let mut out = Vec::new();
    // Updates from a process started after a kill (`session/load` replaying
    // the conversation) are not the cancelled turn's work.
    let mut judged_from = 0;
    for t in &obs.events {
        match &t.event {
            Event::Restarted { .. } => judged_from = out.len(),
            Event::TurnEnd(end) if end.interrupted => out.push(AfterCancel {
                turn: end.i,
                ended_at: t.at,
                updates: Vec::new(),
                charged_elsewhere: 0,
            }),
            Event::UpdateAfterTurn { turn, kind } => {
                let live = &mut out[judged_from..];
                let Some(a) = live.iter_mut().rev().find(|a| a.turn == *turn) else {
                    continue;
                };
                if SESSION_STATE.contains(&kind.as_str()) {
                    continue;
                }
                let left_open = unsettled.iter().any(|u| u.turn == *turn);
                if left_open && TOOL_KINDS.contains(&kind.as_str()) {
                    a.charged_elsewhere += 1;
                } else {
                    a.updates.push((t.at, kind.clone()));
                }
            }
            _ => {}
        }
    }
    out
}

/// `after turn 0 ended cancelled, the agent sent 2 session/update(s) before
/// the next prompt (agent_message_chunk ×2), the first 0.400 s after …`
fn violation(a: &AfterCancel) -> String {
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for (_, k) in &a.updates {
        match kinds.iter_mut().find(|(n, _)| n == k) {
            Some((_, c)) => *c += 1,
            None => kinds.push((k.clone(), 1)),
        }
    }
    let mut named: Vec<String> = kinds
        .iter()
        .take(LISTED)
        .map(|(k, c)| match c {
            1 => clip(k, 60),
            _ => format!("{} ×{c}", clip(k, 60)),
        })
        .collect();
    if kinds.len() > LISTED {
        named.push(format!("… ({} more kinds)", kinds.len() - LISTED));
    }
    let first = (a.updates[0].0 - a.ended_at).max(0.0);
    format!(
        "after turn {} ended cancelled (stopReason cancelled), the agent sent {} session/update(s) \
         before the next prompt ({}), the first {first:.3} s after the turn's end: a cancelled \
         prompt's work must stop before the agent answers it",
        a.turn,
        a.updates.len(),
        named.join(", ")
    )
}

pub fn check(obs: &Observation) -> Option<Check> {
    if !acp_settled::is_acp(obs) {
        return None;
    }
    let inv = Invariant::ProcessHygiene;
    let unsettled = acp_settled::charged(obs);
    let cancelled = after_cancel(obs, &unsettled);
    if cancelled.is_empty() {
        let sent = match obs.interrupt_sent() {
            Some((at, _)) => format!(
                " (session/cancel was sent at {at:.1} s, but no turn's answer was `cancelled`: the turn's outcome judges that)"
            ),
            None => String::new(),
        };
        return Some(Check::skipped(
            inv,
            NAME,
            format!("no turn ended cancelled, so nothing came after a cancel{sent}"),
        ));
    }
    let v: Vec<String> = cancelled
        .iter()
        .filter(|a| !a.updates.is_empty())
        .map(violation)
        .collect();
    if v.is_empty() && cancelled.iter().any(|a| a.charged_elsewhere > 0) {
        let root = unsettled
            .iter()
            .find(|u| {
                cancelled
                    .iter()
                    .any(|a| a.turn == u.turn && a.charged_elsewhere > 0)
            })
            .map(acp_settled::violation);
        return Some(Check::skipped(
            inv,
            NAME,
            format!(
                "because {}/{} failed: {}",
                inv.key(),
                acp_settled::NAME,
                clip(&root.unwrap_or_default(), 200)
            ),
        ));
    }
    let dropped = obs.capped.events_dropped;
    let why = (dropped > 0).then(|| {
        format!("{dropped} events were dropped past the cap, so an update after the cancel may be hidden")
    });
    Some(unless_partial(Check::new(inv, NAME, v), why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{Timed, TurnEnd, TurnModel};
    use crate::oracle::fixtures::*;
    use crate::oracle::Status;

    fn obs(turn0: TurnEnd, extra: Vec<Timed>) -> Observation {
        acp(&scenario("expect: error"), turn0, extra)
    }

    fn judged(turn0: TurnEnd, extra: Vec<Timed>) -> Check {
        check(&obs(turn0, extra)).expect("judged under ACP")
    }

    /// Nothing after the cancelled turn's answer passes; so do session-state
    /// updates (a title, usage), which are not the turn's work.
    #[test]
    fn a_quiet_cancelled_turn_passes() {
        let c = judged(acp_cancelled(), vec![]);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert_eq!((c.invariant, c.name), (Invariant::ProcessHygiene, NAME));
        let c = judged(
            acp_cancelled(),
            vec![
                update_after(3.02, 0, "session_info_update"),
                update_after(3.03, 0, "usage_update"),
            ],
        );
        assert_eq!(c.status, Status::Pass, "{c:?}");
    }

    /// What the reference agent's `acp_update_after_cancel` does: an
    /// `agent_message_chunk` after the cancelled turn's answer. The
    /// violation names the kinds and how long after the end the first came.
    #[test]
    fn a_message_chunk_after_the_cancelled_turn_fails() {
        let c = judged(
            acp_cancelled(),
            vec![
                update_after(3.4, 0, "agent_message_chunk"),
                update_after(3.05, 0, "usage_update"),
                update_after(3.5, 0, "agent_message_chunk"),
                update_after(3.6, 0, "tool_call"),
            ],
        );
        assert_eq!(
            c.violations(),
            [
                "after turn 0 ended cancelled (stopReason cancelled), the agent sent 3 \
              session/update(s) before the next prompt (agent_message_chunk ×2, tool_call), \
              the first 0.400 s after the turn's end: a cancelled prompt's work must stop \
              before the agent answers it"
            ]
        );
    }

    /// Updates after a turn that was answered, not cancelled, are not this
    /// check's: it judges only what follows a cancel.
    #[test]
    fn updates_after_a_completed_turn_are_not_judged() {
        let mut o = obs(acp_cancelled(), vec![]);
        o.events.push(at(
            3.45,
            crate::observe::Event::UpdateAfterTurn {
                turn: 1,
                kind: "agent_message_chunk".into(),
            },
        ));
        assert_eq!(check(&o).unwrap().status, Status::Pass);
    }

    /// A restarted process replaying the conversation on `session/load`
    /// is not the cancelled turn going on.
    #[test]
    fn a_replay_after_a_restart_is_not_work_after_the_cancel() {
        let replay = vec![
            at(
                3.2,
                Event::Restarted {
                    pid: 9,
                    start_turn: Some(1),
                },
            ),
            update_after(3.3, 0, "agent_message_chunk"),
        ];
        assert_eq!(judged(acp_cancelled(), replay).status, Status::Pass);
    }

    /// No turn ended cancelled: nothing to judge, never a pass; a cancel
    /// that was sent but answered otherwise is said so.
    #[test]
    fn no_cancelled_turn_is_not_checked() {
        let c = judged(acp_end_turn("done"), vec![]);
        assert_eq!(
            c.not_checked_reason(),
            Some("no turn ended cancelled, so nothing came after a cancel")
        );
        let c = judged(
            acp_end_turn("done"),
            vec![
                at(2.0, crate::observe::Event::InterruptSent { main_calls: 1 }),
                update_after(3.2, 0, "agent_message_chunk"),
            ],
        );
        assert!(
            c.not_checked_reason()
                .unwrap()
                .contains("session/cancel was sent at 2.0 s, but no turn's answer was `cancelled`"),
            "{c:?}"
        );
    }

    /// One cause, one failed check: a cancelled turn that left a call in
    /// progress and then reported it is `tool_calls_settled`'s failure;
    /// this check names it. A message chunk besides is a cause of its own.
    #[test]
    fn a_call_left_open_at_the_cancel_is_charged_to_tool_calls_settled() {
        let left_open = vec![
            tool_status(1.0, 0, "t1", "in_progress"),
            update_after(3.3, 0, "tool_call_update"),
        ];
        let o = obs(acp_cancelled(), left_open.clone());
        assert!(acp_settled::check(&o).unwrap().failed());
        let c = check(&o).unwrap();
        let why = c.not_checked_reason().expect("not checked");
        assert!(
            why.starts_with(
                "because process_hygiene/tool_calls_settled failed: tool call `t1` was still `in_progress`"
            ),
            "{why}"
        );
        let mut both = left_open;
        both.push(update_after(3.5, 0, "agent_message_chunk"));
        let c = judged(acp_cancelled(), both);
        assert_eq!(c.violations().len(), 1, "{c:?}");
        assert!(c.violations()[0].contains(
            "1 session/update(s) before the next prompt (agent_message_chunk), the first 0.500 s"
        ));
    }

    /// The whole oracle: under ACP both checks are made; under the other
    /// drives neither is in the list.
    #[test]
    fn the_oracle_makes_both_checks_only_under_acp() {
        let s = scenario("expect: error");
        let names = |o: &Observation| -> Vec<&'static str> {
            crate::oracle::check(&s, Default::default(), o)
                .into_iter()
                .filter(|c| c.invariant == Invariant::ProcessHygiene)
                .map(|c| c.name)
                .collect()
        };
        let mut o = obs(acp_cancelled(), vec![]);
        let acp_names = names(&o);
        assert!(acp_names.contains(&NAME), "{acp_names:?}");
        assert!(acp_names.contains(&acp_settled::NAME), "{acp_names:?}");
        for model in [
            None,
            Some(TurnModel::EXEC),
            Some(TurnModel::DRIVER_PROTOCOL),
        ] {
            o.turn_model = model;
            assert_eq!(check(&o), None);
            let n = names(&o);
            assert!(
                !n.contains(&NAME) && !n.contains(&acp_settled::NAME),
                "{n:?}"
            );
        }
    }

    /// A cap that dropped events may hide an update: a pass becomes not
    /// checked, a seen update still fails.
    #[test]
    fn dropped_events_turn_a_pass_into_not_checked() {
        let mut o = obs(acp_cancelled(), vec![]);
        o.capped.events_dropped = 3;
        assert!(check(&o)
            .unwrap()
            .not_checked_reason()
            .unwrap()
            .starts_with("3 events were dropped"));
        let mut o = obs(acp_cancelled(), vec![update_after(3.2, 0, "plan")]);
        o.capped.events_dropped = 3;
        assert!(check(&o).unwrap().failed());
    }
}
