//! ACP drive: `queued_prompt_answered`. A row with `queue_prompt` sends the
//! probe's `session/prompt` while the faulted turn still runs (a message the
//! user queued); the agent must answer it on its own (its answer carries the
//! probe's nonce) or refuse it explicitly (a JSON-RPC error), never leave it
//! unanswered nor answer it with the turn before's answer (copilot-cli
//! #3184). Made only under [`TurnModel::ACP`] for rows with `queue_prompt`;
//! `not checked` when the queued prompt was never sent (the faulted turn
//! reported no tool call, or had ended first). When it fails it is the probe's cause ([`super::depends`]).
//!
//! A kill while the prompt waited ([`Event::Restarted`] after
//! [`Event::PromptQueued`], before its turn's end) killed its request with
//! the process. The restart's `session/load` ([`Event::SessionLoaded`])
//! shows its fate: a replayed user message holding the probe's marker means
//! the agent had persisted it (accepted it); none, that it never kept it.
//! Either way the client re-sends it as the next prompt (an editor retries
//! a request whose connection died; the drive does for every turn a restart
//! resumes at), and the agent's duty is to answer that prompt as its own: a
//! copy it kept pending must not swallow the re-sent one. Passes when the
//! replay already shows the probe's answer, or the re-sent prompt is
//! answered (or refused explicitly); a persisted prompt left unanswered, or
//! answered with another prompt's answer, is lost. `not checked` when the
//! restart used no `session/load` (its fate cannot be seen) or the load
//! failed (`termination/resumes_after_kill` owns that).
//!
//! [`TurnModel::ACP`]: crate::observe::TurnModel::ACP

use super::acp_settled::is_acp;
use super::{clip, Check, Invariant};
use crate::observe::{normalise_replayed, Event, Observation, ReplayedTurn, ACP_PROMPT_ERROR};
use crate::scenarios::Scenario;

pub const NAME: &str = "queued_prompt_answered";

pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    if !is_acp(obs) || s.queue_prompt.is_none() {
        return None;
    }
    let inv = Invariant::Reusability;
    let queued = obs
        .events
        .iter()
        .enumerate()
        .find_map(|(n, t)| match t.event {
            Event::PromptQueued { turn } => Some((n, turn)),
            _ => None,
        });
    let Some((at, turn)) = queued else {
        return Some(Check::skipped(
            inv,
            NAME,
            "the queued prompt was never sent: the faulted turn reported no tool call, or had ended (or never began) before `queue_prompt.after_seconds` after its first one",
        ));
    };
    let Some(restart) = killed_waiting(obs, at, turn) else {
        return Some(Check::new(inv, NAME, judge(obs, turn)));
    };
    let loaded = obs.events[restart..].iter().find_map(|t| match &t.event {
        Event::SessionLoaded {
            turns,
            dropped,
            error,
            ..
        } => Some(((turns.as_slice(), *dropped), error)),
        _ => None,
    });
    let why = match loaded {
        None => "needs session/load: the agent was killed with the queued prompt waiting and restarted without session/load (it does not advertise loadSession, or the profile says load: never), so whether it had kept the prompt cannot be seen".to_string(),
        Some((_, Some(e))) => format!("session/load was answered with an error ({e}): termination/resumes_after_kill owns that failure"),
        Some((replay, None)) => return Some(Check::new(inv, NAME, after_kill(obs, turn, restart, replay))),
    };
    Some(Check::skipped(inv, NAME, why))
}

/// The restart that killed the queued prompt's request: the first
/// [`Event::Restarted`] after it was sent (event `at`), if its turn had not
/// ended before it.
fn killed_waiting(obs: &Observation, at: usize, turn: u64) -> Option<usize> {
    obs.events[at..]
        .iter()
        .enumerate()
        .take_while(|(_, t)| !matches!(&t.event, Event::TurnEnd(e) if e.i == turn))
        .find(|(_, t)| matches!(t.event, Event::Restarted { .. }))
        .map(|(n, _)| at + n)
}

/// After the kill: the replay (`turns`, `dropped` more not kept) shows the
/// probe answered, or the re-sent prompt's own end (after event `restart`)
/// is judged.
fn after_kill(
    obs: &Observation,
    turn: u64,
    restart: usize,
    (turns, dropped): (&[ReplayedTurn], u64),
) -> Vec<String> {
    let marker = normalise_replayed(&format!("[[probe:{}]]", obs.nonce));
    let shown = turns.iter().find(|t| t.user.contains(&marker));
    if shown.is_some_and(|t| t.answer.contains(&format!("alive {}", obs.nonce))) {
        return vec![];
    }
    let b = turn.saturating_sub(1);
    let what = match outcome(obs, turn, restart) {
        Outcome::Answered => return vec![],
        Outcome::Lost => "was never answered nor refused".to_string(),
        Outcome::Stale(said) => format!("was answered with the turn before's answer: {said:?}"),
        Outcome::NoOwn(reason, said) => format!(
            "got no answer of its own (no `alive {}`): stopReason {reason}, {said:?}",
            obs.nonce
        ),
    };
    vec![match shown {
        Some(_) => format!("the agent had persisted the prompt queued while turn {b} ran (session/load replayed it, unanswered), yet the queued message was lost on the kill: re-sent as turn {turn}, it {what}"),
        None if dropped > 0 => format!("the prompt queued while turn {b} ran died with the killed agent (whether session/load replayed it is unknown: {dropped} replayed turn(s) past the kept bound); re-sent as turn {turn}, it {what}"),
        None => format!("the prompt queued while turn {b} ran died with the killed agent (session/load did not replay it); re-sent as turn {turn}, it {what}"),
    }]
}

/// Without a kill: turn `turn`'s own answer, or an explicit refusal.
fn judge(obs: &Observation, turn: u64) -> Vec<String> {
    let b = turn.saturating_sub(1);
    match outcome(obs, turn, 0) {
        Outcome::Answered => vec![],
        Outcome::Lost => vec![format!(
            "the prompt sent while turn {b} ran (turn {turn}) was never answered nor refused: the queued message was lost"
        )],
        Outcome::Stale(said) => vec![format!(
            "the queued prompt (turn {turn}) was answered with the turn before's answer: {said:?}"
        )],
        Outcome::NoOwn(reason, said) => vec![format!(
            "the queued prompt (turn {turn}) got no answer of its own (no `alive {}`): stopReason {reason}, {said:?}",
            obs.nonce
        )],
    }
}

/// What became of turn `turn`'s prompt, by its first end after event
/// `from`.
enum Outcome {
    /// Its own answer (the probe's nonce), or an explicit refusal.
    Answered,
    /// No end.
    Lost,
    /// The turn before's answer (clipped).
    Stale(String),
    /// Another end: its stop reason and text (clipped).
    NoOwn(String, String),
}

fn outcome(obs: &Observation, turn: u64, from: usize) -> Outcome {
    let end = obs.events[from..].iter().find_map(|t| match &t.event {
        Event::TurnEnd(e) if e.i == turn => Some(e),
        _ => None,
    });
    let Some(end) = end else {
        return Outcome::Lost;
    };
    if end.exit_reason == ACP_PROMPT_ERROR
        || end.final_text.contains(&format!("alive {}", obs.nonce))
    {
        return Outcome::Answered;
    }
    let before = obs
        .turn_end(turn.saturating_sub(1))
        .map(|(_, e)| e.final_text);
    let said = clip(&end.final_text, 200);
    if !end.final_text.is_empty() && before.as_deref() == Some(end.final_text.as_str()) {
        return Outcome::Stale(said);
    }
    Outcome::NoOwn(end.exit_reason.clone(), said)
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

    /// A replay: (user message, answer) per turn, and the load's error.
    type Load<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);

    /// Killed at 2 s while the queued prompt waited (turn 0 never ended),
    /// restarted, and `loaded` (replayed user message, answer) if Some.
    fn killed(loaded: Option<Load>) -> Observation {
        let mut extra = vec![
            queued(),
            at(
                2.0,
                Event::Restarted {
                    pid: 9,
                    start_turn: Some(1),
                },
            ),
        ];
        if let Some((turns, error)) = loaded {
            let turns = turns
                .iter()
                .map(|(u, a)| ReplayedTurn {
                    user: (*u).into(),
                    answer: (*a).into(),
                })
                .collect();
            let error = error.map(String::from);
            extra.push(at(
                2.2,
                Event::SessionLoaded {
                    before_turn: 1,
                    turns,
                    dropped: 0,
                    tool_calls: 0,
                    error,
                },
            ));
        }
        let mut obs = acp(&row(), acp_end_turn("never"), extra);
        obs.events
            .retain(|t| !matches!(&t.event, Event::TurnEnd(e) if e.i == 0));
        obs
    }

    const PROBE: &str = "Reply with [[probe:N0NCE]]";

    #[test]
    fn after_a_kill_the_re_sent_prompt_answered_passes_persisted_or_not() {
        for turns in [&[("task", "")][..], &[("task", ""), (PROBE, "")][..]] {
            let c = check(&row(), &killed(Some((turns, None)))).unwrap();
            assert!(c.status == crate::oracle::Status::Pass, "{turns:?}: {c:?}");
        }
    }

    #[test]
    fn after_a_kill_an_answer_in_the_replay_passes() {
        let mut obs = killed(Some((&[(PROBE, "alive N0NCE")], None)));
        without_probe_end(&mut obs);
        let c = check(&row(), &obs).unwrap();
        assert!(c.status == crate::oracle::Status::Pass, "{c:?}");
    }

    /// What `acp_queue_lost_on_kill` does: the replay shows the prompt,
    /// the re-sent one ends `end_turn` with nothing said.
    #[test]
    fn a_persisted_prompt_never_answered_after_the_kill_fails() {
        let mut obs = killed(Some((&[("task", ""), (PROBE, "")], None)));
        set_probe(&mut obs, |e| e.final_text = String::new());
        let c = check(&row(), &obs).unwrap();
        let v = c.violations();
        assert!(
            v[0].contains("had persisted") && v[0].contains("lost on the kill"),
            "{c:?}"
        );
        assert!(v[0].contains("got no answer of its own"), "{c:?}");
        without_probe_end(&mut obs);
        let c = check(&row(), &obs).unwrap();
        assert!(
            c.violations()[0].contains("never answered nor refused"),
            "{c:?}"
        );
    }

    #[test]
    fn a_prompt_not_replayed_and_lost_after_re_sending_fails_saying_so() {
        let mut obs = killed(Some((&[("task", "")], None)));
        without_probe_end(&mut obs);
        let c = check(&row(), &obs).unwrap();
        let v = c.violations();
        assert!(
            v[0].contains("did not replay it") && v[0].contains("never answered"),
            "{c:?}"
        );
    }

    #[test]
    fn a_kill_without_a_load_or_with_a_failed_one_is_not_checked() {
        let c = check(&row(), &killed(None)).unwrap();
        assert!(
            c.not_checked_reason()
                .unwrap()
                .contains("needs session/load"),
            "{c:?}"
        );
        let c = check(&row(), &killed(Some((&[], Some("-32603 gone"))))).unwrap();
        let why = c.not_checked_reason().unwrap();
        assert!(
            why.contains("-32603 gone") && why.contains("resumes_after_kill"),
            "{why}"
        );
    }

    #[test]
    fn a_restart_after_the_queued_prompt_was_answered_is_no_kill_of_it() {
        let mut obs = acp(&row(), acp_end_turn("done"), vec![queued()]);
        obs.events.push(at(
            5.0,
            Event::Restarted {
                pid: 9,
                start_turn: Some(2),
            },
        ));
        let c = check(&row(), &obs).unwrap();
        assert!(c.status == crate::oracle::Status::Pass, "{c:?}");
    }

    #[test]
    fn a_replay_past_its_bound_does_not_claim_the_prompt_was_never_kept() {
        let mut obs = killed(Some((&[("task", "")], None)));
        for t in &mut obs.events {
            if let Event::SessionLoaded { dropped, .. } = &mut t.event {
                *dropped = 3;
            }
        }
        without_probe_end(&mut obs);
        let v = check(&row(), &obs).unwrap().violations().to_vec();
        assert!(
            v[0].contains("is unknown") && !v[0].contains("did not replay"),
            "{v:?}"
        );
    }
}
