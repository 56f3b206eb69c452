//! Exactly-once side effects, read from the journal (`$CHAOS_JOURNAL`) that
//! scripted tool commands append to: no side effect happens twice, and every
//! call whose result says it finished (`done-TOKEN`) left its side effect
//! exactly once. Journal lines are `TOKEN` for a side effect and
//! `bg UNIX_TIME ...` for a background job's heartbeat (not a side effect).

use std::collections::BTreeMap;

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::provider::CallKind;

/// `echo TOKEN >> "$CHAOS_JOURNAL"...` → TOKEN.
fn journal_token(command: &str) -> Option<&str> {
    if !command.contains("CHAOS_JOURNAL") {
        return None;
    }
    let rest = command.strip_prefix("echo ")?;
    rest.split_whitespace().next()
}

/// Side-effect lines and how often each appears.
fn counts(obs: &Observation) -> BTreeMap<&str, usize> {
    let mut c = BTreeMap::new();
    for line in &obs.journal {
        let line = line.trim();
        if line.is_empty() || line.starts_with("bg ") {
            continue;
        }
        *c.entry(line).or_insert(0) += 1;
    }
    c
}

/// Every tool result for `id`, on the wire and in the store.
fn results<'a>(obs: &'a Observation, id: &str) -> Vec<&'a str> {
    let mut out: Vec<&str> = obs
        .recording
        .requests
        .iter()
        .filter(|r| r.kind != CallKind::Aux)
        .flat_map(|r| &r.messages)
        .filter(|m| m.role == "tool" && m.tool_call_id.as_deref() == Some(id))
        .map(|m| m.content.as_str())
        .collect();
    if let Some(msgs) = obs.store.messages() {
        out.extend(
            msgs.iter()
                .filter(|m| m.role == "tool" && m.tool_call_id.as_deref() == Some(id))
                .map(|m| m.content.as_str()),
        );
    }
    out
}

pub fn check(obs: &Observation) -> Vec<Check> {
    let inv = Invariant::SideEffects;
    let calls: Vec<(&str, &str)> = obs
        .recording
        .issued_tool_calls
        .iter()
        .filter_map(|c| {
            Some((
                c.id.as_str(),
                journal_token(c.args.get("command")?.as_str()?)?,
            ))
        })
        .collect();
    if calls.is_empty() && counts(obs).is_empty() {
        return Vec::new();
    }
    let counts = counts(obs);
    let twice = if obs.journal.is_empty() {
        // Calls that write to the journal were made, and it holds nothing at
        // all: it is missing or was never written, so "never twice" is unknown.
        Check::skipped(
            inv,
            "no_side_effect_twice",
            "the journal ($CHAOS_JOURNAL) is missing or empty although tool calls write to it",
        )
    } else {
        Check::new(
            inv,
            "no_side_effect_twice",
            counts
                .iter()
                .filter(|(_, n)| **n > 1)
                .map(|(t, n)| format!("side effect {t} happened {n} times"))
                .collect(),
        )
    };
    let mut once = Vec::new();
    for (id, token) in &calls {
        let done = format!("done-{token}");
        if results(obs, id).iter().any(|r| r.contains(&done)) {
            let n = counts.get(token).copied().unwrap_or(0);
            if n != 1 {
                once.push(format!(
                    "tool call {id} reported {done} but its side effect is in the journal {n} times"
                ));
            }
        }
    }
    vec![
        twice,
        Check::new(inv, "finished_calls_journalled_once", once),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::provider::recording::IssuedToolCall;

    fn with_call(journal: &[&str], result: &str) -> Observation {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.recording.issued_tool_calls.push(IssuedToolCall {
            id: "c1".into(),
            tool: "shell".into(),
            args: serde_json::json!({"command": "echo SE-1 >> \"$CHAOS_JOURNAL\" && echo done-SE-1"}),
            main_index: 0,
        });
        o.recording.requests[0]
            .messages
            .extend([assistant_calls(&["c1"]), tool("c1", result)]);
        o.journal = journal.iter().map(|s| s.to_string()).collect();
        o
    }

    #[test]
    fn once_passes_twice_fails() {
        assert!(check(&with_call(&["SE-1", "bg 1.0 x"], "done-SE-1"))
            .iter()
            .all(|c| !c.failed()));
        let c = check(&with_call(&["SE-1", "SE-1"], "done-SE-1"));
        assert!(c[0].violations()[0].contains("SE-1 happened 2 times"));
        assert!(c[1].violations()[0].contains("2 times"));
    }

    #[test]
    fn finished_call_without_side_effect_fails_unfinished_does_not() {
        assert!(check(&with_call(&[], "done-SE-1"))[1].failed());
        assert!(!check(&with_call(&[], "interrupted: not re-run"))[1].failed());
    }

    #[test]
    fn an_empty_journal_is_not_evidence_of_once() {
        let c = check(&with_call(&[], "interrupted: not re-run"));
        assert!(c[0].not_checked(), "{c:?}");
        assert!(c[0]
            .not_checked_reason()
            .unwrap()
            .contains("missing or empty"));
    }

    #[test]
    fn no_journal_no_checks() {
        let s = scenario("expect: ended");
        assert!(check(&healthy(&s, end(0, true, false, "x"))).is_empty());
    }
}
