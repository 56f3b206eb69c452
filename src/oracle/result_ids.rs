//! Tool results by id (history integrity), on rows whose faults are value
//! faults (a replayed tool call that reuses an id, a tool-calls finish with
//! no calls, arguments cut for length): no request of the run (the faulted
//! turn's and the probe's) carries two results for one tool-call id
//! (`one_result_per_id`), and none carries a result for an id the model
//! never issued (`results_for_issued_ids`: the agent made up a call the
//! model did not make). An id that begins with an issued one is that call
//! re-keyed by the agent (Qwen Code's `ID__qwen_dup_2` for a replayed
//! call), not a made-up one.
//!
//! Placeholder ids (`__fake_id__`, empty) and the ids chaosrun's Gemini
//! parse makes up for a function response that carries none (`NAME#K`) are
//! not evidence: when every result's id is one, `results_for_issued_ids` is
//! `not checked`. Rows whose answers come from an upstream or a cassette
//! are not judged (their ids are not chaosrun's to know). Pure over the
//! row and the recorded calls.

use std::collections::{BTreeMap, BTreeSet};

use super::{Check, Invariant};
use crate::observe::{is_placeholder_id, Observation};
use crate::provider::replies::Source;
use crate::provider::{CallKind, RequestRecord};
use crate::scenarios::Scenario;

/// Violations listed per check, at most.
const LISTED: usize = 10;

/// An id chaosrun's Gemini parse made up (`shell#0`): the agent sent none.
fn made_up(id: &str) -> bool {
    id.rsplit_once('#').is_some_and(|(name, k)| {
        !name.is_empty() && !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit())
    })
}

/// The model calls whose bodies carry the conversation: the faulted turn's
/// and the probe's (a resumed agent's history shows there too).
fn judged(obs: &Observation) -> impl Iterator<Item = &RequestRecord> {
    obs.recording
        .requests
        .iter()
        .filter(|r| matches!(r.kind, CallKind::Main | CallKind::Probe))
}

/// The ids of a request's tool results that are the agent's own.
fn result_ids(r: &RequestRecord) -> impl Iterator<Item = &str> {
    r.messages
        .iter()
        .filter(|m| m.role == "tool")
        .filter_map(|m| m.tool_call_id.as_deref())
        .filter(|id| !is_placeholder_id(id) && !made_up(id))
}

/// Both checks, on a row with a value-fault rule whose answers are
/// chaosrun's own (empty elsewhere).
pub fn check(s: &Scenario, obs: &Observation) -> Vec<Check> {
    let value = s.responder.iter().any(|r| r.reply.value_fault());
    let local = s
        .responder
        .iter()
        .all(|r| matches!(r.reply.source(), Source::Local));
    if !value || !local {
        return Vec::new();
    }
    let inv = Invariant::HistoryIntegrity;
    if obs.recording.requests_dropped > 0 {
        let why = "not every provider call was kept";
        return vec![
            Check::skipped(inv, "one_result_per_id", why),
            Check::skipped(inv, "results_for_issued_ids", why),
        ];
    }
    vec![one_per_id(obs), issued_only(obs)]
}

fn one_per_id(obs: &Observation) -> Check {
    let mut v = Vec::new();
    for r in judged(obs) {
        let mut n: BTreeMap<&str, usize> = BTreeMap::new();
        for id in result_ids(r) {
            *n.entry(id).or_default() += 1;
        }
        v.extend(
            n.into_iter().filter(|(_, k)| *k > 1).map(|(id, k)| {
                format!("request #{} carries {k} results for tool call {id}", r.seq)
            }),
        );
    }
    v.truncate(LISTED);
    Check::new(Invariant::HistoryIntegrity, "one_result_per_id", v)
}

fn issued_only(obs: &Observation) -> Check {
    let inv = Invariant::HistoryIntegrity;
    let issued: BTreeSet<&str> = obs
        .recording
        .issued_tool_calls
        .iter()
        .map(|c| c.id.as_str())
        .collect();
    let any_result = judged(obs).any(|r| {
        r.messages
            .iter()
            .any(|m| m.role == "tool" && m.tool_call_id.is_some())
    });
    let own = judged(obs).any(|r| result_ids(r).next().is_some());
    if any_result && !own {
        return Check::skipped(
            inv,
            "results_for_issued_ids",
            "the agent's tool results carry no ids of their own (a placeholder, or none on Gemini)",
        );
    }
    let mut v = Vec::new();
    let mut seen = BTreeSet::new();
    let known = |id: &str| issued.iter().any(|i| id.starts_with(i));
    for r in judged(obs) {
        for id in result_ids(r).filter(|id| !known(id)) {
            if seen.insert(id) {
                v.push(format!(
                    "request #{} carries a result for tool call {id}, which the model never issued",
                    r.seq
                ));
            }
        }
    }
    v.truncate(LISTED);
    Check::new(inv, "results_for_issued_ids", v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, ToolCall};
    use crate::oracle::fixtures::{end, healthy, msg, request, row};
    use crate::provider::recording::IssuedToolCall;
    use crate::provider::CallKind;

    fn call(id: &str) -> Message {
        let mut m = msg("assistant", "");
        m.tool_calls = vec![ToolCall {
            id: id.into(),
            name: "shell".into(),
            arguments: "{}".into(),
        }];
        m
    }

    fn result(id: &str) -> Message {
        let mut m = msg("tool", "out");
        m.tool_call_id = Some(id.into());
        m
    }

    /// The checks over one request carrying `messages`, the model having
    /// issued `issued`.
    fn judged(messages: Vec<Message>, issued: &[&str]) -> Vec<Check> {
        let s = row("{kind: text, text: '', finish_reason: tool_calls}");
        let mut o = healthy(&s, end(0, true, false, "done"));
        o.recording.requests = vec![request(1, CallKind::Main, messages)];
        o.recording.issued_tool_calls = issued
            .iter()
            .map(|id| IssuedToolCall {
                id: id.to_string(),
                tool: "shell".into(),
                args: serde_json::json!({}),
                main_index: 0,
            })
            .collect();
        check(&s, &o)
    }

    fn failed(checks: &[Check]) -> Vec<(&str, String)> {
        checks
            .iter()
            .filter(|c| c.failed())
            .map(|c| (c.name, c.violations().join("; ")))
            .collect()
    }

    #[test]
    fn one_result_per_issued_id_passes() {
        let c = judged(vec![msg("user", "go"), call("c1"), result("c1")], &["c1"]);
        assert_eq!(c.len(), 2);
        assert!(failed(&c).is_empty(), "{c:?}");
    }

    #[test]
    fn two_results_for_one_id_fail_only_that_check() {
        let msgs = vec![call("c1"), result("c1"), call("c1"), result("c1")];
        let checks = judged(msgs, &["c1"]);
        let f = failed(&checks);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].0, "one_result_per_id");
        assert!(
            f[0].1
                .contains("request #1 carries 2 results for tool call c1"),
            "{f:?}"
        );
    }

    #[test]
    fn a_result_for_an_id_never_issued_fails() {
        let msgs = vec![call("made_up_7"), result("made_up_7")];
        let checks = judged(msgs, &["c1"]);
        let f = failed(&checks);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].0, "results_for_issued_ids");
        assert!(
            f[0].1.contains("made_up_7, which the model never issued"),
            "{f:?}"
        );
    }

    #[test]
    fn results_without_ids_of_their_own_are_not_checked() {
        let c = judged(vec![call("shell#0"), result("shell#0")], &["c1"]);
        let ids = c
            .iter()
            .find(|c| c.name == "results_for_issued_ids")
            .unwrap();
        assert!(ids.not_checked(), "{ids:?}");
    }

    #[test]
    fn rows_without_a_value_fault_are_not_judged() {
        let s = row("{kind: error, status: 500}");
        let o = healthy(&s, end(0, false, true, "error"));
        assert!(check(&s, &o).is_empty());
    }

    #[test]
    fn an_issued_call_re_keyed_by_the_agent_is_not_made_up() {
        let msgs = vec![
            call("c1"),
            result("c1"),
            call("c1__qwen_dup_2"),
            result("c1__qwen_dup_2"),
        ];
        assert!(failed(&judged(msgs, &["c1"])).is_empty());
    }

    #[test]
    fn the_probes_request_is_judged_too() {
        let s = row("{kind: text, text: '', finish_reason: tool_calls}");
        let mut o = healthy(&s, end(0, true, false, "done"));
        let mut probe = request(
            2,
            CallKind::Probe,
            vec![call("c1"), result("c1"), result("c1")],
        );
        probe.main_index = None;
        o.recording.requests.push(probe);
        o.recording.issued_tool_calls = vec![IssuedToolCall {
            id: "c1".into(),
            tool: "shell".into(),
            args: serde_json::json!({}),
            main_index: 0,
        }];
        let checks = check(&s, &o);
        let f = failed(&checks);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].1
                .contains("request #2 carries 2 results for tool call c1"),
            "{f:?}"
        );
    }
}
