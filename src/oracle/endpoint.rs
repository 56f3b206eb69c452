//! A row's `endpoint_fault` (the agent's other endpoints: a model list, an
//! account or auth endpoint, a server probe; issue 44.6): whether it landed
//! (`endpoint_fault_landed`, an exercised check: a request besides the
//! model calls was faulted), and the row's not-applicable verdict when the
//! agent made no such request at all (it has no other endpoint to fault:
//! measured, so the row neither passes nor fails on an agent it cannot
//! test). What a faulted endpoint must not do (hold the boot or a turn past
//! its deadline, make the agent retry it in a loop) is judged by the
//! termination and call checks as on any row. Pure over the recording.

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::provider::{CallKind, EndpointFault};
use crate::scenarios::Scenario;

pub const NAME: &str = "endpoint_fault_landed";

/// The agent's requests besides model calls: (method path, faulted).
fn others(obs: &Observation) -> Vec<(String, bool)> {
    obs.recording
        .requests
        .iter()
        .filter(|r| r.kind == CallKind::Aux && r.model.is_none())
        .map(|r| {
            (
                format!("{} {}", r.method, r.path),
                EndpointFault::is_recorded(&r.reply),
            )
        })
        .collect()
}

/// The exercised check of a row with `endpoint_fault`.
pub fn exercised(s: &Scenario, obs: &Observation) -> Option<Check> {
    let fault = s.endpoint_fault?;
    let others = others(obs);
    if others.is_empty() {
        // The row is N/A ([`not_applicable`]): not a failure of its own.
        let why = "the agent made no request besides its model calls";
        return Some(Check::skipped(Invariant::Exercised, NAME, why));
    }
    let v = if !others.iter().any(|(_, faulted)| *faulted) {
        vec![format!(
            "no request besides the model calls got the row's fault (each {fault})"
        )]
    } else {
        vec![]
    };
    Some(Check::new(Invariant::Exercised, NAME, v))
}

/// Why the row does not apply: the agent made no request besides its
/// model calls (none to fault), with how many model calls it made.
pub fn not_applicable(s: &Scenario, obs: &Observation) -> Option<String> {
    s.endpoint_fault?;
    if obs.setup_error.is_some() || !others(obs).is_empty() {
        return None;
    }
    Some(format!(
        "the agent made no request besides its {} model call(s) on the provider's host: it has no other endpoint there to fault",
        obs.recording.requests.len()
    ))
}

/// Evidence for a deadline that passed while endpoint faults landed: what
/// was faulted ("; requests besides the model calls the row's endpoint
/// fault left unanswered: GET /v1/models ×2"), or nothing.
pub fn note(s: &Scenario, obs: &Observation) -> String {
    let Some(fault) = s.endpoint_fault else {
        return String::new();
    };
    let mut counts: Vec<(String, usize)> = Vec::new();
    for (what, _) in others(obs).into_iter().filter(|(_, f)| *f) {
        match counts.iter_mut().find(|(w, _)| *w == what) {
            Some((_, n)) => *n += 1,
            None => counts.push((what, 1)),
        }
    }
    if counts.is_empty() {
        return String::new();
    }
    let list: Vec<String> = counts
        .into_iter()
        .map(|(w, n)| if n > 1 { format!("{w} ×{n}") } else { w })
        .collect();
    format!(
        "; requests besides the model calls, each {fault} by the row's `endpoint_fault`: {}",
        super::clip(&list.join(", "), 300)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::fixtures::{end, healthy, request, scenario};
    use crate::oracle::Status;
    use crate::provider::RequestRecord;

    fn other(path: &str, reply: &str) -> RequestRecord {
        let mut r = request(9, CallKind::Aux, vec![]);
        r.method = "GET".into();
        r.path = path.into();
        r.reply = reply.into();
        r.model = None;
        r
    }

    #[test]
    fn landed_on_a_faulted_request_and_not_applicable_without_any() {
        let s = scenario("expect: ended\nendpoint_fault: {kind: hang}");
        let mut o = healthy(&s, end(0, false, true, ""));
        assert!(not_applicable(&s, &o)
            .unwrap()
            .contains("no request besides its"));
        let c = exercised(&s, &o).unwrap();
        assert!(matches!(c.status, Status::NotChecked { .. }), "{c:?}");
        // A request answered as usual (no fault) is not a landing.
        o.recording.requests.push(other("/v1/models", "models"));
        assert_eq!(not_applicable(&s, &o), None);
        assert!(matches!(
            exercised(&s, &o).unwrap().status,
            Status::Fail { .. }
        ));
        o.recording
            .requests
            .push(other("/api/tags", "endpoint_hang"));
        assert_eq!(exercised(&s, &o).unwrap().status, Status::Pass);
        let plain = scenario("expect: ended");
        assert!(exercised(&plain, &o).is_none() && not_applicable(&plain, &o).is_none());
    }
}
