//! ACP drive: `tool_calls_settled`. Every tool call the agent reported in a
//! turn's `session/update`s (`tool_call`, `tool_call_update`: the drive's
//! [`Event::ToolStatus`]) has, by that turn's `TurnEnd` (the
//! `session/prompt` response), a last status of `completed`, `failed` or
//! `cancelled`; a cancelled turn included: an editor shows a call still
//! `pending` or `in_progress` as running forever. Judged only under
//! [`TurnModel::ACP`] (no other drive records tool statuses: the check is
//! omitted, like every drive-specific check); `not checked` when the agent
//! reported no tool call, when no turn that reported one ended (a killed
//! turn's calls died with its process), or when events were dropped past
//! the cap (a dropped status may have settled a call).

use std::collections::BTreeMap;

use super::{clip, Check, Invariant};
use crate::observe::{Event, Observation, TurnEnd, TurnModel};

pub const NAME: &str = "tool_calls_settled";

/// The statuses a tool call ends in (the ACP `ToolCallStatus` values).
const SETTLED: [&str; 3] = ["completed", "failed", "cancelled"];

/// Unsettled calls listed in the violations, at most.
const LISTED: usize = 10;

/// The drive that records the update stream ran this observation.
pub(super) fn is_acp(obs: &Observation) -> bool {
    obs.turn_model() == TurnModel::ACP
}

/// A tool call whose last status at its turn's end was not a settled one.
pub(super) struct Unsettled {
    pub turn: u64,
    pub id: String,
    pub status: String,
    /// How the turn ended: its `exit_reason` (the stopReason, or `error`).
    pub stop: String,
    pub cancelled: bool,
}

/// What the tool statuses show, judged at each turn's end.
#[derive(Default)]
struct Settlement {
    /// Tool calls reported at all.
    reported: usize,
    /// Tool calls of turns that ended (judged).
    judged: usize,
    unsettled: Vec<Unsettled>,
    /// Turns with reported calls that never ended (not judged).
    unended: Vec<u64>,
}

/// Walk the events in order: statuses per (turn, id) in first-report
/// order, judged and dropped at the turn's end; a turn started again
/// (after a kill and restart) starts afresh.
fn settle(obs: &Observation) -> Settlement {
    let mut open: BTreeMap<(u64, String), (usize, String)> = BTreeMap::new();
    let mut out = Settlement::default();
    for (seq, t) in obs.events.iter().enumerate() {
        match &t.event {
            Event::TurnStart { i } => open.retain(|(turn, _), _| turn != i),
            Event::ToolStatus { turn, id, status } => {
                let key = (*turn, id.clone());
                if !open.contains_key(&key) {
                    out.reported += 1;
                }
                open.entry(key).or_insert((seq, String::new())).1 = status.clone();
            }
            Event::TurnEnd(end) => {
                let mut ended: Vec<_> = open
                    .iter()
                    .filter(|((turn, _), _)| *turn == end.i)
                    .map(|((_, id), (seq, status))| (*seq, id.clone(), status.clone()))
                    .collect();
                open.retain(|(turn, _), _| *turn != end.i);
                ended.sort();
                out.judged += ended.len();
                out.unsettled.extend(
                    ended
                        .into_iter()
                        .filter(|(_, _, status)| !SETTLED.contains(&status.as_str()))
                        .map(|(_, id, status)| unsettled(end, id, status)),
                );
            }
            _ => {}
        }
    }
    out.unended = open.keys().map(|(turn, _)| *turn).collect();
    out.unended.dedup();
    out
}

fn unsettled(end: &TurnEnd, id: String, status: String) -> Unsettled {
    Unsettled {
        turn: end.i,
        id,
        status,
        stop: end.exit_reason.clone(),
        cancelled: end.interrupted,
    }
}

/// `tool call `call_1` was still `in_progress` (its last status) when turn 0
/// ended (stopReason end_turn): …`
pub(super) fn violation(u: &Unsettled) -> String {
    let stop = match u.stop.as_str() {
        "" => String::new(),
        s => format!(" (stopReason {})", clip(s, 40)),
    };
    let rule = if u.cancelled {
        "a cancelled prompt's tool calls must end `cancelled` (or `completed`, `failed`) before the agent answers it"
    } else {
        "every tool call must end `completed`, `failed` or `cancelled` before the turn's answer"
    };
    format!(
        "tool call `{}` was still `{}` (its last status) when turn {} ended{stop}: {rule}",
        clip(&u.id, 80),
        clip(&u.status, 40),
        u.turn
    )
}

/// The unsettled calls this check fails on (none when it is omitted, not
/// checked or passes): what `quiet_after_cancel` leaves to it.
pub(super) fn charged(obs: &Observation) -> Vec<Unsettled> {
    if !is_acp(obs) || obs.capped.events_dropped > 0 {
        return Vec::new();
    }
    settle(obs).unsettled
}

pub fn check(obs: &Observation) -> Option<Check> {
    if !is_acp(obs) {
        return None;
    }
    let inv = Invariant::ProcessHygiene;
    if obs.capped.events_dropped > 0 {
        return Some(Check::skipped(
            inv,
            NAME,
            format!(
                "{} events were dropped past the cap, so a status that settled a tool call may be among them",
                obs.capped.events_dropped
            ),
        ));
    }
    let s = settle(obs);
    if s.reported == 0 {
        return Some(Check::skipped(
            inv,
            NAME,
            "the agent reported no tool call with a status (no `tool_call` or `tool_call_update` carrying one): nothing to judge",
        ));
    }
    if s.judged == 0 {
        let turns: Vec<String> = s.unended.iter().map(u64::to_string).collect();
        return Some(Check::skipped(
            inv,
            NAME,
            format!(
                "the agent reported tool calls only in turn(s) {} that never ended, so no turn's end shows their statuses",
                turns.join(", ")
            ),
        ));
    }
    let mut v: Vec<String> = s.unsettled.iter().take(LISTED).map(violation).collect();
    if s.unsettled.len() > LISTED {
        v.push(format!(
            "… and {} more tool call(s) left unsettled",
            s.unsettled.len() - LISTED
        ));
    }
    Some(Check::new(inv, NAME, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Timed;
    use crate::oracle::fixtures::*;
    use crate::oracle::Status;

    fn judged(turn0: TurnEnd, extra: Vec<Timed>) -> Check {
        let s = scenario("expect: error");
        check(&acp(&s, turn0, extra)).expect("judged under ACP")
    }

    /// A call reported pending, then in progress, then completed before the
    /// answer passes; so does one that failed, and a cancelled turn's call
    /// marked cancelled.
    #[test]
    fn calls_that_end_completed_failed_or_cancelled_pass() {
        let c = judged(
            acp_end_turn("done"),
            vec![
                tool_status(1.0, 0, "call_1", "pending"),
                tool_status(1.2, 0, "call_1", "in_progress"),
                tool_status(1.4, 0, "call_2", "pending"),
                tool_status(1.5, 0, "call_2", "failed"),
                tool_status(2.0, 0, "call_1", "completed"),
            ],
        );
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert_eq!((c.invariant, c.name), (Invariant::ProcessHygiene, NAME));
        let c = judged(
            acp_cancelled(),
            vec![
                tool_status(1.0, 0, "t1", "in_progress"),
                tool_status(2.9, 0, "t1", "cancelled"),
            ],
        );
        assert_eq!(c.status, Status::Pass, "{c:?}");
    }

    /// What the reference agent's `acp_tool_left_in_progress` does: the
    /// call's last status is `in_progress` when the turn ends `end_turn`.
    #[test]
    fn a_call_left_in_progress_at_a_completed_turn_fails_naming_it() {
        let c = judged(
            acp_end_turn("done"),
            vec![
                tool_status(1.0, 0, "call_7", "pending"),
                tool_status(1.2, 0, "call_7", "in_progress"),
            ],
        );
        assert_eq!(
            c.violations(),
            [
                "tool call `call_7` was still `in_progress` (its last status) when turn 0 ended \
              (stopReason end_turn): every tool call must end `completed`, `failed` or \
              `cancelled` before the turn's answer"
            ]
        );
    }

    /// An interrupted turn must not leave a call pending either.
    #[test]
    fn a_call_left_pending_at_a_cancelled_turn_fails() {
        let c = judged(
            acp_cancelled(),
            vec![
                tool_status(1.0, 0, "t1", "pending"),
                tool_status(1.1, 0, "t2", "pending"),
                tool_status(1.2, 0, "t2", "cancelled"),
            ],
        );
        let v = c.violations();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].starts_with(
                "tool call `t1` was still `pending` (its last status) when turn 0 ended (stopReason cancelled): a cancelled prompt's"
            ),
            "{v:?}"
        );
    }

    /// Each turn is judged at its own end: a status reported in a later
    /// turn (under that turn's number) does not settle an earlier turn's
    /// call.
    #[test]
    fn the_status_at_the_turns_end_counts_and_each_turn_is_judged_apart() {
        let c = judged(
            acp_end_turn("done"),
            vec![
                tool_status(1.0, 0, "a", "in_progress"),
                tool_status(3.2, 1, "a", "completed"),
            ],
        );
        assert_eq!(c.violations().len(), 1, "{c:?}");
        assert!(c.violations()[0].contains("`a` was still `in_progress`"));
        assert!(c.violations()[0].contains("when turn 0 ended"));
    }

    /// Nothing reported: nothing to judge, never a pass.
    #[test]
    fn no_tool_call_reported_is_not_checked() {
        let c = judged(acp_end_turn("done"), vec![]);
        assert!(
            c.not_checked_reason()
                .unwrap()
                .starts_with("the agent reported no tool call"),
            "{c:?}"
        );
    }

    /// A turn killed with its call in progress never ended: its calls died
    /// with the process, and no other turn reported one.
    #[test]
    fn calls_only_in_a_turn_that_never_ended_are_not_checked() {
        let s = scenario("expect: error");
        let mut obs = acp(&s, acp_end_turn("done"), vec![]);
        obs.events.retain(|t| !matches!(t.event, Event::TurnEnd(_)));
        obs.events
            .push(tool_status(1.0, 0, "call_1", "in_progress"));
        obs.events.sort_by(|a, b| a.at.total_cmp(&b.at));
        let c = check(&obs).unwrap();
        assert_eq!(
            c.not_checked_reason(),
            Some("the agent reported tool calls only in turn(s) 0 that never ended, so no turn's end shows their statuses")
        );
    }

    /// A turn run again after a kill starts afresh: the killed process's
    /// call, left in progress, is not charged to the restarted turn, whose
    /// own call settled.
    #[test]
    fn a_turn_run_again_after_a_restart_is_judged_on_its_own_calls() {
        let c = judged(
            acp_end_turn("done"),
            vec![
                tool_status(0.5, 0, "killed_1", "in_progress"),
                at(
                    0.6,
                    Event::Restarted {
                        pid: 7,
                        start_turn: Some(0),
                    },
                ),
                at(0.7, Event::TurnStart { i: 0 }),
                tool_status(1.0, 0, "call_1", "pending"),
                tool_status(2.0, 0, "call_1", "completed"),
            ],
        );
        assert_eq!(c.status, Status::Pass, "{c:?}");
    }

    /// A dropped event may have been the status that settled a call.
    #[test]
    fn dropped_events_make_it_not_checked() {
        let s = scenario("expect: error");
        let mut obs = acp(
            &s,
            acp_end_turn("done"),
            vec![tool_status(1.0, 0, "call_1", "in_progress")],
        );
        obs.capped.events_dropped = 12;
        let c = check(&obs).unwrap();
        assert!(c
            .not_checked_reason()
            .unwrap()
            .starts_with("12 events were dropped"));
        assert!(charged(&obs).is_empty());
    }

    /// Only the ACP drive records tool statuses: under the driver protocol
    /// and exec mode the check is omitted, as drive-specific checks are.
    #[test]
    fn other_drives_omit_the_check() {
        let s = scenario("expect: error");
        let mut obs = acp(
            &s,
            acp_end_turn("done"),
            vec![tool_status(1.0, 0, "call_1", "in_progress")],
        );
        assert!(check(&obs).unwrap().failed());
        for model in [
            None,
            Some(TurnModel::EXEC),
            Some(TurnModel::DRIVER_PROTOCOL),
        ] {
            obs.turn_model = model;
            assert_eq!(check(&obs), None, "{model:?}");
            assert!(charged(&obs).is_empty());
        }
    }

    /// A flood of unsettled calls is listed up to a bound.
    #[test]
    fn many_unsettled_calls_are_listed_up_to_a_bound() {
        let extra = (0..25)
            .map(|n| tool_status(1.0, 0, &format!("c{n}"), "pending"))
            .collect();
        let c = judged(acp_end_turn("done"), extra);
        let v = c.violations();
        assert_eq!(v.len(), LISTED + 1);
        assert_eq!(v[LISTED], "… and 15 more tool call(s) left unsettled");
        assert!(v[0].contains("`c0`"), "first reported first: {v:?}");
    }
}
