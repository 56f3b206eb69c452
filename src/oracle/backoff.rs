//! Backoff that honours the server (`provider_calls / backoff`): when the
//! faulted turn's calls come, not only how many. Pure over the recorded main
//! calls:
//! - after a reply carrying a retry-after of N s (the `retry-after` header on
//!   the OpenAI and Anthropic wires, Gemini's `RetryInfo.retryDelay`), the
//!   next main call comes no sooner than N s, less [`RETRY_AFTER_TOLERANCE`];
//! - within an episode of retryable errors (429, 408, 409, 5xx) without a
//!   retry-after, no call follows the error sooner than [`EPISODE_FLOOR`]: a
//!   hot loop fails even under the call bound;
//! - an empty 200 (no content, no tool calls: a value fault) is retried like
//!   an error: a call that asks the same conversation again comes no sooner
//!   than [`EPISODE_FLOOR`] after it.
//!
//! Gaps are measured between the arrivals of consecutive main calls (an
//! error is sent as soon as its call arrives). Only pairs of calls whose
//! indices follow each other are judged, so a recording that dropped its
//! middle calls is never misread; a pass over such a recording is `not
//! checked`. Final errors (quota used up, context too long) are judged by the
//! call bound, not here.

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::provider::RequestRecord;
use crate::scenarios::Scenario;

/// How much earlier than its retry-after a call may come, in seconds
/// (retry-after is whole seconds; 100 ms is 5 % of 2 s).
pub const RETRY_AFTER_TOLERANCE: f64 = 0.1;
/// The least gap after a retryable error, in seconds.
pub const EPISODE_FLOOR: f64 = 0.1;

/// The check, when the faulted turn met at least one error reply or empty
/// answer.
pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    let rec = &obs.recording;
    let mut main: Vec<&RequestRecord> = rec.main_requests().collect();
    let empty = |r: &RequestRecord| {
        r.rule
            .and_then(|i| s.responder.get(i))
            .is_some_and(|rule| rule.reply.empty_answer())
    };
    if !main.iter().any(|r| r.error.is_some() || empty(r)) {
        return None;
    }
    main.sort_by_key(|r| r.main_index);
    let mut v = violations(&main);
    v.extend(after_empty(&main, empty));
    let check = Check::new(Invariant::ProviderCalls, "backoff", v);
    let partial = (rec.requests_dropped > 0).then(|| {
        format!(
            "{} requests were not kept (the recording's bound), so some gaps were not seen",
            rec.requests_dropped
        )
    });
    Some(super::unless_partial(check, partial))
}

/// Every gap that came too soon, given main calls in index order.
pub fn violations(main: &[&RequestRecord]) -> Vec<String> {
    let mut out = Vec::new();
    for pair in main.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let (Some(ia), Some(ib)) = (a.main_index, b.main_index) else {
            continue;
        };
        let Some(err) = a.error.filter(|e| e.retryable) else {
            continue;
        };
        if ib != ia + 1 {
            continue;
        }
        let gap = b.at - a.at;
        match err.retry_after {
            Some(n) if gap + RETRY_AFTER_TOLERANCE < n as f64 => out.push(format!(
                "call {ib} came {gap:.3} s after call {ia}'s {} with retry-after {n} s \
                 (tolerance {RETRY_AFTER_TOLERANCE} s)",
                err.status
            )),
            None if gap < EPISODE_FLOOR => out.push(format!(
                "call {ib} came {gap:.3} s after call {ia}'s retryable {}: under the \
                 {EPISODE_FLOOR} s floor of a retry episode (a hot loop)",
                err.status
            )),
            _ => {}
        }
    }
    out
}

/// Re-asks of an empty answer that came under the floor: the next main
/// call, when it sends the same conversation as the call answered empty.
fn after_empty(main: &[&RequestRecord], empty: impl Fn(&RequestRecord) -> bool) -> Vec<String> {
    let same = |a: &RequestRecord, b: &RequestRecord| {
        !a.messages.is_empty()
            && a.messages == b.messages
            && a.messages_dropped == b.messages_dropped
    };
    main.windows(2)
        .filter(|p| empty(p[0]) && p[0].main_index.zip(p[1].main_index).is_some_and(|(a, b)| b == a + 1))
        .filter(|p| same(p[0], p[1]) && p[1].at - p[0].at < EPISODE_FLOOR)
        .map(|p| {
            format!(
                "call {} asked again {:.3} s after call {}'s empty answer: under the {EPISODE_FLOOR} s \
                 floor of a retry (an empty 200 is retried like an error)",
                p[1].main_index.unwrap_or_default(),
                p[1].at - p[0].at,
                p[0].main_index.unwrap_or_default()
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::provider::CallKind;
    use crate::provider::ReplyError;

    fn call(i: u64, at: f64, error: Option<(u16, Option<u64>, bool)>) -> RequestRecord {
        let mut r = request(i, CallKind::Main, vec![]);
        r.at = at;
        r.error = error.map(|(status, retry_after, retryable)| ReplyError {
            status,
            retry_after,
            retryable,
        });
        r
    }

    fn obs_with(calls: Vec<RequestRecord>) -> Observation {
        let s = scenario("expect: error");
        let mut o = healthy(&s, end(0, true, false, "err"));
        o.recording.main_calls = calls.len() as u64;
        o.recording.requests = calls;
        o
    }

    #[test]
    fn retry_after_honoured_passes_and_ignored_fails_with_the_gap() {
        let honoured = obs_with(vec![
            call(0, 1.0, Some((429, Some(2), true))),
            call(1, 3.05, Some((429, Some(2), true))),
            call(2, 5.0, None),
        ]);
        assert_eq!(
            check(&scenario("expect: error"), &honoured).unwrap().status,
            super::super::Status::Pass
        );
        let ignored = obs_with(vec![
            call(0, 1.0, Some((429, Some(2), true))),
            call(1, 1.2, None),
        ]);
        let c = check(&scenario("expect: error"), &ignored).unwrap();
        assert_eq!(c.name, "backoff");
        assert!(
            c.violations()[0]
                .contains("call 1 came 0.200 s after call 0's 429 with retry-after 2 s"),
            "{:?}",
            c.violations()
        );
    }

    #[test]
    fn a_hot_loop_under_the_call_bound_fails_the_floor() {
        let hot = obs_with(vec![
            call(0, 1.0, Some((503, None, true))),
            call(1, 1.01, Some((503, None, true))),
            call(2, 1.5, None),
        ]);
        let v = check(&scenario("expect: error"), &hot)
            .unwrap()
            .violations()
            .to_vec();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("under the 0.1 s floor"), "{v:?}");
    }

    #[test]
    fn final_errors_and_error_free_turns_are_not_judged_here() {
        assert!(check(
            &scenario("expect: error"),
            &obs_with(vec![call(0, 1.0, None), call(1, 1.0, None)])
        )
        .is_none());
        let quota = obs_with(vec![
            call(0, 1.0, Some((429, None, false))),
            call(1, 1.001, Some((429, None, false))),
        ]);
        assert!(!check(&scenario("expect: error"), &quota).unwrap().failed());
    }

    #[test]
    fn dropped_middles_are_never_misread_and_a_pass_is_not_checked() {
        let mut o = obs_with(vec![
            call(0, 1.0, Some((503, None, true))),
            call(7, 1.01, None),
        ]);
        o.recording.requests[1].main_index = Some(7);
        o.recording.requests_dropped = 6;
        let c = check(&scenario("expect: error"), &o).unwrap();
        assert!(c.not_checked(), "{c:?}");
    }

    #[test]
    fn an_empty_answer_asked_again_at_once_fails_and_after_the_floor_passes() {
        let yaml = "scenarios:\n  - id: s\n    expect: ended\n    responder: [{reply: {kind: text, text: ''}}]\n";
        let s = crate::scenarios::load_str(yaml, "fixture.yaml")
            .unwrap()
            .scenarios
            .remove(0);
        let asked = |i: u64, at: f64| {
            let mut r = call(i, at, None);
            r.messages = vec![msg("user", "hi")];
            r.rule = Some(0);
            r
        };
        let judged = |calls: Vec<RequestRecord>| {
            let mut o = healthy(&s, end(0, true, false, ""));
            o.recording.main_calls = calls.len() as u64;
            o.recording.requests = calls;
            check(&s, &o).expect("an empty answer met")
        };
        let hot = judged(vec![asked(0, 1.0), asked(1, 1.02)]);
        assert!(hot.failed(), "{hot:?}");
        assert!(
            hot.violations()[0].contains("call 1 asked again 0.020 s after call 0's empty answer"),
            "{hot:?}"
        );
        assert!(!judged(vec![asked(0, 1.0), asked(1, 1.5)]).failed());
        // A next call that moved on (another conversation) is no re-ask.
        let mut moved = asked(1, 1.02);
        moved.messages.push(msg("user", "please answer"));
        assert!(!judged(vec![asked(0, 1.0), moved]).failed());
    }
}
