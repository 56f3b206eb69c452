//! Backoff that honours the server (`provider_calls / backoff`): when the
//! faulted turn's calls come, not only how many. Pure over the recorded main
//! calls:
//! - after a reply carrying a retry-after of N s (the `retry-after` header on
//!   the OpenAI and Anthropic wires, Gemini's `RetryInfo.retryDelay`), the
//!   next main call comes no sooner than N s, less [`RETRY_AFTER_TOLERANCE`];
//! - within an episode of retryable errors (429, 408, 409, 5xx) without a
//!   retry-after, no call follows the error sooner than [`EPISODE_FLOOR`]: a
//!   hot loop fails even under the call bound.
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

/// How much earlier than its retry-after a call may come, in seconds
/// (retry-after is whole seconds; 100 ms is 5 % of 2 s).
pub const RETRY_AFTER_TOLERANCE: f64 = 0.1;
/// The least gap after a retryable error, in seconds.
pub const EPISODE_FLOOR: f64 = 0.1;

/// The check, when the faulted turn met at least one error reply.
pub fn check(obs: &Observation) -> Option<Check> {
    let rec = &obs.recording;
    let mut main: Vec<&RequestRecord> = rec.main_requests().collect();
    if !main.iter().any(|r| r.error.is_some()) {
        return None;
    }
    main.sort_by_key(|r| r.main_index);
    let check = Check::new(Invariant::ProviderCalls, "backoff", violations(&main));
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
        assert_eq!(check(&honoured).unwrap().status, super::super::Status::Pass);
        let ignored = obs_with(vec![
            call(0, 1.0, Some((429, Some(2), true))),
            call(1, 1.2, None),
        ]);
        let c = check(&ignored).unwrap();
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
        let v = check(&hot).unwrap().violations().to_vec();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("under the 0.1 s floor"), "{v:?}");
    }

    #[test]
    fn final_errors_and_error_free_turns_are_not_judged_here() {
        assert!(check(&obs_with(vec![call(0, 1.0, None), call(1, 1.0, None)])).is_none());
        let quota = obs_with(vec![
            call(0, 1.0, Some((429, None, false))),
            call(1, 1.001, Some((429, None, false))),
        ]);
        assert!(!check(&quota).unwrap().failed());
    }

    #[test]
    fn dropped_middles_are_never_misread_and_a_pass_is_not_checked() {
        let mut o = obs_with(vec![
            call(0, 1.0, Some((503, None, true))),
            call(7, 1.01, None),
        ]);
        o.recording.requests[1].main_index = Some(7);
        o.recording.requests_dropped = 6;
        let c = check(&o).unwrap();
        assert!(c.not_checked(), "{c:?}");
    }
}
