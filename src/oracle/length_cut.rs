//! A partial answer sent once (history integrity / `partial_sent_once`), on
//! rows with an answer cut for length: the agent's next model call after a
//! cut answer carries that partial text at most once (as the model's own
//! message to continue from, or not at all), never twice (kept as the
//! model's message and pasted again into a "continue from …" request, or
//! stored twice). Each cut answer differs (`{{call}}` in the row's text),
//! so a second copy is the agent's, not a second answer.
//!
//! `not checked` when no model call followed a cut answer (the agent ended
//! the turn on it) or not every call was kept. Pure over the row and the
//! recorded calls.

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::provider::RequestRecord;
use crate::scenarios::Scenario;

const NAME: &str = "partial_sent_once";

/// The partial text main request `r` was answered with, if cut.
fn cut(s: &Scenario, obs: &Observation, r: &RequestRecord) -> Option<String> {
    let rule = s.responder.get(r.rule?)?;
    let text = rule.reply.cut_text(&obs.nonce, r.main_index?)?;
    (!text.trim().is_empty()).then_some(text)
}

/// The check, on a row with a cut-for-length answer (`None` elsewhere).
pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    if !s
        .responder
        .iter()
        .any(|r| r.reply.cut_text("", 0).is_some())
    {
        return None;
    }
    let inv = Invariant::HistoryIntegrity;
    let same = s.responder.iter().any(|r| {
        r.reply
            .cut_text("n", 0)
            .is_some_and(|t| Some(t) == r.reply.cut_text("n", 1))
    });
    if same {
        return Some(Check::skipped(
            inv,
            NAME,
            "the row's cut answer is the same on every call (no `{{call}}` in its text): a second copy may be a second answer",
        ));
    }
    if obs.recording.requests_dropped > 0 {
        return Some(Check::skipped(
            inv,
            NAME,
            "not every provider call was kept",
        ));
    }
    let mut main: Vec<&RequestRecord> = obs.recording.main_requests().collect();
    main.sort_by_key(|r| r.seq);
    let mut followed = false;
    let mut v = Vec::new();
    for (k, r) in main.iter().enumerate() {
        let (Some(text), Some(next)) = (cut(s, obs, r), main.get(k + 1)) else {
            continue;
        };
        followed = true;
        let n: usize = next
            .messages
            .iter()
            .map(|m| m.content.matches(&text).count())
            .sum();
        if n > 1 {
            v.push(format!(
                "request #{} carries the partial answer of request #{} {n} times ({}): the cut text was sent again",
                next.seq,
                r.seq,
                super::clip(&text, 60)
            ));
        }
    }
    v.truncate(10);
    if !followed {
        return Some(Check::skipped(
            inv,
            NAME,
            "no model call followed an answer cut for length (the turn ended on it)",
        ));
    }
    Some(Check::new(inv, NAME, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use crate::oracle::fixtures::{end, healthy, msg, request, NONCE};
    use crate::provider::CallKind;

    fn row() -> Scenario {
        let yaml = "scenarios:\n  - id: s\n    expect: ended\n    responder:\n      - {reply: {kind: text, text: 'part {{call}} {{nonce}}', finish_reason: length}}\n";
        crate::scenarios::load_str(yaml, "fixture.yaml")
            .unwrap()
            .scenarios
            .remove(0)
    }

    fn call(seq: u64, messages: Vec<Message>) -> RequestRecord {
        let mut r = request(seq, CallKind::Main, messages);
        r.main_index = Some(seq);
        r.rule = Some(0);
        r
    }

    fn judged(requests: Vec<RequestRecord>) -> Check {
        let s = row();
        let mut o = healthy(&s, end(0, true, false, "done"));
        o.recording.main_calls = requests.len() as u64;
        o.recording.requests = requests;
        check(&s, &o).expect("a row with a cut answer")
    }

    #[test]
    fn the_partial_kept_once_passes_and_pasted_again_fails() {
        let part = format!("part 0 {NONCE}");
        let once = vec![
            call(0, vec![msg("user", "go")]),
            call(
                1,
                vec![
                    msg("user", "go"),
                    msg("assistant", &part),
                    msg("user", "Continue."),
                ],
            ),
        ];
        assert!(!judged(once).failed());
        let twice = vec![
            call(0, vec![msg("user", "go")]),
            call(
                1,
                vec![
                    msg("user", "go"),
                    msg("assistant", &part),
                    msg("user", &format!("Continue from: {part}")),
                ],
            ),
        ];
        let c = judged(twice);
        assert!(c.failed(), "{c:?}");
        assert!(
            c.violations()[0]
                .contains("request #1 carries the partial answer of request #0 2 times"),
            "{c:?}"
        );
    }

    #[test]
    fn a_turn_that_ended_on_the_cut_is_not_checked() {
        assert!(judged(vec![call(0, vec![msg("user", "go")])]).not_checked());
    }

    #[test]
    fn a_cut_text_the_same_on_every_call_is_not_checked() {
        let yaml = "scenarios:\n  - id: s\n    expect: ended\n    responder:\n      - {reply: {kind: text, text: 'part {{nonce}}', finish_reason: length}}\n";
        let s = crate::scenarios::load_str(yaml, "fixture.yaml")
            .unwrap()
            .scenarios
            .remove(0);
        let o = healthy(&s, end(0, true, false, "done"));
        let c = check(&s, &o).unwrap();
        assert!(
            c.not_checked_reason().unwrap().contains("{{call}}"),
            "{c:?}"
        );
    }
}
