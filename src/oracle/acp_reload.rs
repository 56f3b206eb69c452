//! ACP drive: `reload_keeps_done_turns` (history integrity). After a kill,
//! the restart's `session/load` replays the conversation (the drive's
//! [`Event::SessionLoaded`]); every turn that ended `completed` before it
//! must be there, in order: a replayed user message with the turn's answer
//! (its `TurnEnd` final, compared as the normalised first 200 characters),
//! each replayed turn standing for one completed turn at most.
//! Judged only under [`TurnModel::ACP`] on runs with a restart; `not
//! checked` when the restart used no `session/load` (the agent does not
//! advertise `loadSession`, or the profile says `load: never`) and when the
//! load was answered with an error (`termination/resumes_after_kill` owns
//! that failure), and when no turn completed before the restart. A turn a
//! row's `store_damage` destroyed a record of (its user message or answer in
//! the transcript just before the damage, not among what it left intact) is
//! not asked for.

use super::{clip, Check, Invariant};
use crate::observe::{normalise_replayed, Event, Observation, ReplayedTurn, TurnModel};

pub const NAME: &str = "reload_keeps_done_turns";

/// Missing turns listed in the violation, at most.
const LISTED: usize = 10;

pub fn check(obs: &Observation) -> Vec<Check> {
    let inv = Invariant::HistoryIntegrity;
    if obs.turn_model() != TurnModel::ACP {
        return vec![];
    }
    let restarted = obs
        .events
        .iter()
        .any(|t| matches!(t.event, Event::Restarted { .. }));
    let loaded = obs
        .events
        .iter()
        .enumerate()
        .find_map(|(n, t)| match &t.event {
            Event::SessionLoaded {
                turns,
                dropped,
                error,
                ..
            } => Some((n, turns, *dropped, error)),
            _ => None,
        });
    let Some((at, turns, dropped, error)) = loaded else {
        if !restarted {
            return vec![];
        }
        return vec![Check::skipped(
            inv,
            NAME,
            "the restart used no session/load (the agent does not advertise loadSession, or the profile says load: never)",
        )];
    };
    if let Some(e) = error {
        return vec![Check::skipped(
            inv,
            NAME,
            format!("session/load was answered with an error ({e}): termination/resumes_after_kill owns that failure"),
        )];
    }
    if dropped > 0 {
        return vec![Check::skipped(
            inv,
            NAME,
            format!("the replay had more turns than kept ({dropped} past the bound)"),
        )];
    }
    let done: Vec<_> = obs.events[..at]
        .iter()
        .filter_map(|t| match &t.event {
            Event::TurnEnd(end) if end.completed => Some(end),
            _ => None,
        })
        .collect();
    if done.is_empty() {
        return vec![Check::skipped(
            inv,
            NAME,
            "no turn completed before the restart: nothing the replay had to keep",
        )];
    }
    // A turn whose record the row's `store_damage` destroyed is not the
    // replay's to keep (`store_resumed_past_damage` judges the rest).
    let done: Vec<_> = done
        .into_iter()
        .filter(|end| !super::store_damage::took_turn(obs, end))
        .collect();
    if done.is_empty() {
        return vec![Check::skipped(
            inv,
            NAME,
            "the row's store_damage destroyed a record of every turn completed before the restart",
        )];
    }
    let mut rest = turns.iter();
    let missing: Vec<String> = done
        .into_iter()
        .filter(|end| !replayed(&mut rest, &end.final_text))
        .map(|end| format!("turn {} (answer {:?})", end.i, clip(&end.final_text, 60)))
        .collect();
    let v = if missing.is_empty() {
        vec![]
    } else {
        let listed: Vec<_> = missing.iter().take(LISTED).cloned().collect();
        vec![format!(
            "session/load replayed {} turn(s) without {} completed before the kill: {}",
            turns.len(),
            missing.len(),
            listed.join(", ")
        )]
    };
    vec![Check::new(inv, NAME, v)]
}

/// The next replayed turn in `rest` with a user message and `answer`
/// (normalised) as its answer, taken: the completed turns are found in
/// order, each replayed turn standing for one of them at most.
fn replayed<'a>(rest: &mut impl Iterator<Item = &'a ReplayedTurn>, answer: &str) -> bool {
    let want = normalise_replayed(answer);
    rest.any(|t| !t.user.is_empty() && t.answer == want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::fixtures::{acp, acp_end_turn, at, scenario};
    use crate::oracle::Status;

    fn restarted(t: f64) -> crate::observe::Timed {
        at(
            t,
            Event::Restarted {
                pid: 9,
                start_turn: Some(1),
            },
        )
    }

    fn loaded(t: f64, turns: &[(&str, &str)], error: Option<&str>) -> crate::observe::Timed {
        let turns = turns
            .iter()
            .map(|(u, a)| ReplayedTurn {
                user: (*u).into(),
                answer: (*a).into(),
            })
            .collect();
        at(
            t,
            Event::SessionLoaded {
                before_turn: 1,
                turns,
                dropped: 0,
                tool_calls: 0,
                error: error.map(String::from),
            },
        )
    }

    fn judged(extra: Vec<crate::observe::Timed>) -> Check {
        let o = acp(
            &scenario("expect: error"),
            acp_end_turn("the answer\n  is 42 "),
            extra,
        );
        let mut c = check(&o);
        assert_eq!(c.len(), 1, "{c:?}");
        c.remove(0)
    }

    #[test]
    fn a_replay_with_the_completed_turn_passes() {
        let c = judged(vec![
            restarted(3.2),
            loaded(3.3, &[("task", "the answer is 42")], None),
        ]);
        assert_eq!(c.status, Status::Pass, "{c:?}");
    }

    /// What `acp_load_drops_last_turn` does: the replay leaves out the last
    /// completed turn; the violation names it.
    #[test]
    fn a_replay_without_the_completed_turn_fails_naming_it() {
        let c = judged(vec![restarted(3.2), loaded(3.3, &[], None)]);
        assert_eq!(
            c.violations(),
            ["session/load replayed 0 turn(s) without 1 completed before the kill: turn 0 (answer \"the answer\\n  is 42 \")"]
        );
        let c = judged(vec![
            restarted(3.2),
            loaded(3.3, &[("", "the answer is 42")], None),
        ]);
        assert_eq!(c.violations().len(), 1, "no user message: {c:?}");
    }

    #[test]
    fn a_load_error_is_not_checked_naming_the_check_that_owns_it() {
        let c = judged(vec![
            restarted(3.2),
            loaded(3.3, &[], Some("-32603 no such session")),
        ]);
        let why = c.not_checked_reason().unwrap();
        assert!(why.contains("-32603 no such session"), "{why}");
        assert!(why.contains("termination/resumes_after_kill"), "{why}");
    }

    #[test]
    fn no_turn_completed_before_the_load_is_not_checked() {
        let o = acp(
            &scenario("expect: error"),
            acp_end_turn("x"),
            vec![restarted(2.0), loaded(2.1, &[], None)],
        );
        let c = check(&o);
        assert!(
            c[0].not_checked_reason()
                .unwrap()
                .contains("no turn completed"),
            "{c:?}"
        );
    }

    #[test]
    fn a_restart_without_a_load_is_not_checked() {
        let c = judged(vec![restarted(3.2)]);
        assert!(
            c.not_checked_reason().unwrap().contains("load: never"),
            "{c:?}"
        );
    }

    #[test]
    fn no_restart_or_another_drive_is_not_judged() {
        let o = acp(&scenario("expect: error"), acp_end_turn("x"), vec![]);
        assert!(check(&o).is_empty());
        let mut o = acp(
            &scenario("expect: error"),
            acp_end_turn("x"),
            vec![restarted(3.2)],
        );
        o.turn_model = None;
        assert!(check(&o).is_empty());
    }
}
