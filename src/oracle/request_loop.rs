//! The same request in a loop (bounded provider calls / `request_loop`),
//! on rows whose faults are value faults (a 200 that is wrong without being
//! an error: [`Reply::value_fault`]): no conversation goes to the model
//! more than `api_max_retries` + 1 times (each life of a killed agent may:
//! × lives). Re-sends after error replies are retries, which the call
//! bound and the backoff check judge; a layered retry's sends (Codex's
//! `request_max_retries` × `stream_max_retries`, 3 × 3 at the row's 2) and
//! an agent's own re-asks after a malformed tool call (Hermes: 1 + 4
//! sends, its truncated-tool-call retry) are not judged here on other rows
//! (docs/checks.md).
//!
//! Ids aside: two main calls are the same request when their messages
//! (role, content and its length, tool calls' names and arguments,
//! reasoning) are, whatever ids the agent gave its calls and results and
//! however else its bodies differ (request ids, timestamps in metadata).
//! agentbreak's duplicate detector: an agent that sends an empty or refused
//! answer's request again and again loops here while its calls may stay
//! under the row's bound. `not checked` when the profile renders no
//! `api_max_retries`, or renders `api_retry_budget` (the agent's own retry
//! count, unknown here, then bounds it), or when not every call was kept.
//! Pure over the row, the profile's capability and the recorded calls.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::{Check, Invariant};
use crate::message::Message;
use crate::observe::Observation;
#[cfg(doc)]
use crate::provider::Reply;
use crate::provider::RequestRecord;
use crate::scenarios::Scenario;

const NAME: &str = "request_loop";

/// Call numbers listed in a violation, at most.
const LISTED: usize = 10;

/// The request's conversation, ids aside (`None`: its body was not read as
/// messages, so it is not judged).
fn conversation(r: &RequestRecord) -> Option<[u8; 32]> {
    if r.messages.is_empty() {
        return None;
    }
    let mut h = Sha256::new();
    h.update(r.messages_dropped.to_le_bytes());
    for m in &r.messages {
        message(&mut h, m);
    }
    Some(h.finalize().into())
}

fn message(h: &mut Sha256, m: &Message) {
    for part in [m.role.as_str(), m.content.as_str(), m.reasoning.as_str()] {
        h.update(part.len().to_le_bytes());
        h.update(part.as_bytes());
    }
    h.update(m.content_chars.to_le_bytes());
    for c in &m.tool_calls {
        for part in [c.name.as_str(), c.arguments.as_str()] {
            h.update(part.len().to_le_bytes());
            h.update(part.as_bytes());
        }
    }
    h.update([0xff]);
}

/// One request sent more than `bound` times: the violation that says so.
fn violation(seqs: &[u64], first: &RequestRecord, bound: u64, retries: u64, lives: u64) -> String {
    let shown: Vec<String> = seqs.iter().take(LISTED).map(|s| format!("#{s}")).collect();
    let more = seqs.len().saturating_sub(LISTED);
    let last = first.messages.last().map_or("", |m| m.role.as_str());
    let per_life = if lives > 1 {
        format!(" per life, {bound} over the agent's {lives} lives")
    } else {
        String::new()
    };
    format!(
        "the same request ({} messages, the last from `{last}`) went to the model {} times \
         (calls {}{}); api_max_retries is {retries}, so one request is sent at most {}{per_life}: \
         the agent loops on it",
        first.messages.len() + first.messages_dropped,
        seqs.len(),
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
        retries + 1,
    )
}

/// The check, on a row with a value-fault rule (`None` elsewhere).
pub fn check(s: &Scenario, renders_retries: bool, obs: &Observation) -> Option<Check> {
    if !s.responder.iter().any(|r| r.reply.value_fault()) {
        return None;
    }
    Some(judged(s, renders_retries, obs))
}

fn judged(s: &Scenario, renders_retries: bool, obs: &Observation) -> Check {
    let inv = Invariant::ProviderCalls;
    if !renders_retries {
        return Check::skipped(
            inv,
            NAME,
            "the profile renders no `api_max_retries`: the agent's own retry count, unknown here, bounds a request's sends",
        );
    }
    let rec = &obs.recording;
    if rec.requests_dropped > 0 {
        return Check::skipped(inv, NAME, "not every provider call was kept");
    }
    let retries = u64::from(s.knobs.api_max_retries);
    let lives = 1 + obs.faults_landed().0 as u64;
    let bound = (retries + 1) * lives;
    let mut sent: BTreeMap<[u8; 32], Vec<&RequestRecord>> = BTreeMap::new();
    for r in rec.main_requests() {
        if let Some(key) = conversation(r) {
            sent.entry(key).or_default().push(r);
        }
    }
    let mut loops: Vec<&Vec<&RequestRecord>> =
        sent.values().filter(|v| v.len() as u64 > bound).collect();
    loops.sort_by_key(|v| v[0].seq);
    let v = loops
        .into_iter()
        .map(|v| {
            let seqs: Vec<u64> = v.iter().map(|r| r.seq).collect();
            violation(&seqs, v[0], bound, retries, lives)
        })
        .collect();
    Check::new(inv, NAME, v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;
    use crate::oracle::fixtures::{end, healthy, msg, request, row};
    use crate::provider::CallKind;

    fn send(seq: u64, messages: Vec<Message>) -> RequestRecord {
        request(seq, CallKind::Main, messages)
    }

    fn asked() -> Vec<Message> {
        vec![msg("system", "be brief"), msg("user", "hi")]
    }

    /// A row whose every call gets `reply`.
    fn observed(requests: Vec<RequestRecord>) -> (Scenario, Observation) {
        let s = row("{kind: text, text: ''}");
        let mut o = healthy(&s, end(0, true, false, "done"));
        o.recording.main_calls = requests.len() as u64;
        o.recording.requests = requests;
        (s, o)
    }

    fn judged(requests: Vec<RequestRecord>, renders: bool) -> Check {
        let (s, o) = observed(requests);
        check(&s, renders, &o).expect("a value-fault row")
    }

    #[test]
    fn rows_without_a_value_fault_are_not_judged() {
        let s = row("{kind: error, status: 500}");
        let mut o = healthy(&s, end(0, false, true, "error"));
        o.recording.requests = (0..9).map(|i| send(i, asked())).collect();
        assert!(check(&s, true, &o).is_none());
    }

    #[test]
    fn retries_within_the_knob_pass_and_one_more_send_fails() {
        // api_max_retries is 2 by default: three sends are its retries.
        let three: Vec<_> = (0..3).map(|i| send(i, asked())).collect();
        assert!(!judged(three, true).failed());
        let four: Vec<_> = (0..4).map(|i| send(i, asked())).collect();
        let c = judged(four, true);
        assert!(c.failed(), "{c:?}");
        let v = &c.violations()[0];
        assert!(v.contains("4 times (calls #0, #1, #2, #3)"), "{v}");
        assert!(v.contains("api_max_retries is 2"), "{v}");
    }

    #[test]
    fn ids_aside_the_same_conversation_is_the_same_request() {
        let with_id = |id: &str| {
            let mut call = msg("assistant", "");
            call.tool_calls = vec![ToolCall {
                id: id.into(),
                name: "shell".into(),
                arguments: "{\"command\":\"ls\"}".into(),
            }];
            let mut result = msg("tool", "a b");
            result.tool_call_id = Some(id.into());
            let mut m = asked();
            m.extend([call, result]);
            m
        };
        let sends: Vec<_> = (0..4)
            .map(|i| send(i, with_id(&format!("call_{i}"))))
            .collect();
        assert!(judged(sends, true).failed());
    }

    #[test]
    fn a_growing_conversation_is_no_loop() {
        let sends: Vec<_> = (0..8)
            .map(|i| {
                let mut m = asked();
                m.extend((0..i).map(|k| msg("user", &format!("continue {k}"))));
                send(i, m)
            })
            .collect();
        assert!(!judged(sends, true).failed());
    }

    #[test]
    fn without_the_retry_knob_or_every_call_it_is_not_checked() {
        let four: Vec<_> = (0..4).map(|i| send(i, asked())).collect();
        assert!(judged(four.clone(), false).not_checked());
        let (s, mut o) = observed(four);
        o.recording.requests_dropped = 1;
        assert!(check(&s, true, &o).unwrap().not_checked());
    }
}
