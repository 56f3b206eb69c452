//! A credential that expired mid-run (bounded provider calls /
//! `no_retry_without_new_credential`): on a row with a `credential:`, once a
//! request of the faulted turn was refused as expired (`auth_expired`, the
//! wire's 401), no later request of that turn may carry the same credential
//! (by the fingerprint the provider recorded): a 401 is not retried with the
//! key it refused; the agent re-reads its key (and retries once with a new
//! one) or surfaces the error. The probe turn is the reusability check's.
//! Pure over the recorded requests; `not checked` when nothing was refused.

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::provider::recording::{CallKind, RequestRecord};
use crate::provider::replies::Reply;
use crate::scenarios::Scenario;

const NAME: &str = "no_retry_without_new_credential";
/// Retries named, at most, in one violation.
const NAMED: usize = 5;

pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    s.credential.as_ref()?;
    let inv = Invariant::ProviderCalls;
    let rec = &obs.recording;
    let mut turn: Vec<&RequestRecord> = rec
        .requests
        .iter()
        .filter(|r| r.kind != CallKind::Probe)
        .collect();
    turn.sort_by_key(|r| r.seq);
    let refused = |r: &RequestRecord| Reply::refuses_credential(&r.reply);
    let Some(first) = turn.iter().position(|r| refused(r)) else {
        return Some(Check::skipped(
            inv,
            NAME,
            "no request of the faulted turn was refused as expired (the credential never expired)",
        ));
    };
    let mut violations = Vec::new();
    for (i, r) in turn.iter().enumerate().skip(first) {
        if !refused(r) {
            continue;
        }
        let retries: Vec<&&RequestRecord> = turn[i + 1..]
            .iter()
            .filter(|l| l.credential == r.credential)
            .collect();
        if let Some(next) = retries.first() {
            // Each refused credential once: its first refusal names them all.
            if turn[first..i]
                .iter()
                .any(|e| refused(e) && e.credential == r.credential)
            {
                continue;
            }
            violations.push(describe(r, next, &retries));
        }
    }
    let partial = (rec.requests_dropped > 0).then(|| {
        format!(
            "{} requests were not kept; no retry seen among those kept",
            rec.requests_dropped
        )
    });
    Some(super::unless_partial(
        Check::new(inv, NAME, violations),
        partial,
    ))
}

fn describe(refused: &RequestRecord, next: &RequestRecord, retries: &[&&RequestRecord]) -> String {
    let named: Vec<String> = retries
        .iter()
        .take(NAMED)
        .map(|r| format!("#{} at {:.3} s", r.seq, r.at))
        .collect();
    let more = retries.len().saturating_sub(NAMED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let key = refused.credential.as_deref().unwrap_or("none");
    format!(
        "request #{} at {:.3} s was refused as expired (401) and {} request(s) retried it with the \
         same credential (fingerprint {key}): {}{more}, the first {:.3} s later; a 401 is not \
         retried with the key it refused (re-read the credential, or surface the error)",
        refused.seq,
        refused.at,
        retries.len(),
        named.join(", "),
        next.at - refused.at,
    )
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    fn row() -> Scenario {
        scenario("credential: {expires_at_call: 1, refresh: turn_end}\nexpect: error")
    }

    fn call(seq: u64, kind: CallKind, key: &str, refused: bool) -> RequestRecord {
        let mut r = request(seq, kind, vec![]);
        r.credential = Some(key.into());
        r.reply = if refused { "auth_expired" } else { "text" }.into();
        r
    }

    fn obs(calls: Vec<RequestRecord>) -> Observation {
        let s = row();
        let mut o = healthy(&s, end(0, false, true, "HTTP 401"));
        o.recording.requests = calls;
        o
    }

    #[test]
    fn a_401_retried_with_the_same_key_fails_naming_the_requests() {
        let o = obs(vec![
            call(0, CallKind::Main, "aaa", false),
            call(1, CallKind::Main, "aaa", true),
            call(2, CallKind::Main, "aaa", true),
            call(3, CallKind::Main, "aaa", true),
        ]);
        let c = check(&row(), &o).unwrap();
        assert_eq!(c.name, NAME);
        assert_eq!(c.invariant, Invariant::ProviderCalls);
        let v = c.violations();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("request #1 at 1.000 s was refused as expired"),
            "{v:?}"
        );
        assert!(v[0].contains("2 request(s) retried it with the same credential (fingerprint aaa): #2 at 2.000 s, #3 at 3.000 s"), "{v:?}");
    }

    #[test]
    fn a_retry_with_a_new_key_and_a_probe_are_clean() {
        let o = obs(vec![
            call(0, CallKind::Main, "aaa", false),
            call(1, CallKind::Main, "aaa", true),
            call(2, CallKind::Main, "bbb", false),
            // The probe turn is the reusability check's, even with the old key.
            call(3, CallKind::Probe, "aaa", true),
        ]);
        let c = check(&row(), &o).unwrap();
        assert_eq!(c.status, super::super::Status::Pass, "{c:?}");
    }

    #[test]
    fn nothing_refused_is_not_checked_and_a_row_without_credential_has_no_check() {
        let o = obs(vec![call(0, CallKind::Main, "aaa", false)]);
        let c = check(&row(), &o).unwrap();
        assert!(
            c.not_checked_reason().unwrap().contains("never expired"),
            "{c:?}"
        );
        assert!(check(&scenario("expect: error"), &o).is_none());
        let mut o = obs(vec![
            call(1, CallKind::Main, "aaa", true),
            call(2, CallKind::Main, "bbb", false),
        ]);
        o.recording.requests_dropped = 3;
        assert!(check(&row(), &o).unwrap().not_checked());
    }
}
