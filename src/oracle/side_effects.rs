//! Exactly-once side effects, read from the journal (`$CHAOS_JOURNAL`) that
//! scripted tool commands append to: no side effect happens twice, and every
//! call whose result says it finished (`done-TOKEN`) left its side effect
//! exactly once. Journal lines are `TOKEN` for a side effect and
//! `bg UNIX_TIME ...` for a background job's heartbeat (not a side effect).

use std::collections::BTreeMap;

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::provider::CallKind;
use crate::scenarios::Scenario;

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

/// Whether a tool result says its command finished: `done` as the
/// command's output, not only inside the command's own text quoted back
/// (`echo done-X`, as an agent's error about arguments it could not run
/// repeats them).
fn reports_done(result: &str, done: &str) -> bool {
    result.match_indices(done).any(|(i, _)| {
        !result[..i]
            .trim_end_matches([' ', '\\', '"'])
            .ends_with("echo")
    })
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

/// Whether the scenario's responder asks for a tool call that journals a
/// side effect.
fn table_journals(s: &Scenario) -> bool {
    s.responder.iter().any(|r| {
        r.reply.tool_calls().iter().any(|c| {
            c.args
                .get("command")
                .and_then(|v| v.as_str())
                .and_then(journal_token)
                .is_some()
        })
    })
}

pub fn check(s: &Scenario, obs: &Observation) -> Vec<Check> {
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
        if !table_journals(s) {
            return Vec::new();
        }
        let why = "the scenario journals side effects, but no such tool call was issued and the journal holds no side-effect token (heartbeat lines aside)";
        return vec![
            Check::skipped(inv, "no_side_effect_twice", why),
            Check::skipped(inv, "finished_calls_journalled_once", why),
        ];
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
        if results(obs, id).iter().any(|r| reports_done(r, &done)) {
            let n = counts.get(token).copied().unwrap_or(0);
            if n != 1 {
                once.push(format!(
                    "tool call {id} reported {done} but its side effect is in the journal {n} times"
                ));
            }
        }
    }
    let cut = (obs.capped.journal_read < obs.capped.journal_bytes).then(|| {
        format!(
            "chaosrun read {} of the journal's {} bytes (its cap): no repeat in what was read",
            obs.capped.journal_read, obs.capped.journal_bytes
        )
    });
    vec![
        super::unless_partial(twice, cut.clone()),
        super::unless_partial(Check::new(inv, "finished_calls_journalled_once", once), cut),
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
    fn a_journal_read_only_in_part_never_passes() {
        let mut o = with_call(&["SE-1"], "done-SE-1");
        let s = scenario("expect: ended");
        assert!(check(&s, &o)
            .iter()
            .all(|c| c.status == crate::oracle::Status::Pass));
        o.capped.journal_bytes = 10 << 20;
        o.capped.journal_read = 4 << 20;
        for c in check(&s, &o) {
            assert!(
                c.not_checked_reason()
                    .is_some_and(|r| r.contains("of the journal's")),
                "{c:?}"
            );
        }
        o.journal.push("SE-1".into());
        let c = check(&s, &o);
        assert!(
            c.iter().any(|c| c.failed()),
            "a repeat seen still fails: {c:?}"
        );
    }

    fn s() -> Scenario {
        scenario("expect: ended")
    }

    #[test]
    fn a_journalling_call_never_issued_is_not_checked() {
        let yaml = "scenarios:\n  - id: s\n    expect: ended\n    responder:\n      - reply: {kind: tool_call, calls: [{tool: shell, args: {command: \"echo SE-1 >> $CHAOS_JOURNAL\"}}]}\n";
        let sc = crate::scenarios::load_str(yaml, "t.yaml")
            .unwrap()
            .scenarios
            .remove(0);
        let c = check(&sc, &healthy(&sc, end(0, true, false, "x")));
        assert_eq!(c.len(), 2);
        assert!(c.iter().all(|c| c.not_checked()), "{c:?}");
    }

    #[test]
    fn once_passes_twice_fails() {
        assert!(check(&s(), &with_call(&["SE-1", "bg 1.0 x"], "done-SE-1"))
            .iter()
            .all(|c| !c.failed()));
        let c = check(&s(), &with_call(&["SE-1", "SE-1"], "done-SE-1"));
        assert!(c[0].violations()[0].contains("SE-1 happened 2 times"));
        assert!(c[1].violations()[0].contains("2 times"));
    }

    #[test]
    fn finished_call_without_side_effect_fails_unfinished_does_not() {
        assert!(check(&s(), &with_call(&[], "done-SE-1"))[1].failed());
        assert!(!check(&s(), &with_call(&[], "interrupted: not re-run"))[1].failed());
    }

    #[test]
    fn an_empty_journal_is_not_evidence_of_once() {
        let c = check(&s(), &with_call(&[], "interrupted: not re-run"));
        assert!(c[0].not_checked(), "{c:?}");
        assert!(c[0]
            .not_checked_reason()
            .unwrap()
            .contains("missing or empty"));
    }

    #[test]
    fn no_journal_no_checks() {
        let s = scenario("expect: ended");
        assert!(check(&s, &healthy(&s, end(0, true, false, "x"))).is_empty());
    }

    #[test]
    fn a_result_that_quotes_the_command_back_is_not_done() {
        assert!(reports_done("done-SE-1\n", "done-SE-1"));
        assert!(reports_done("{\"output\": \"done-SE-1\\n\"}", "done-SE-1"));
        let quoted = "Error: invalid input {\"command\":\"echo SE-1 && echo done-SE-1\"}";
        assert!(!reports_done(quoted, "done-SE-1"));
        assert!(!reports_done("echo \\\"done-SE-1", "done-SE-1"));
        assert!(reports_done(&format!("{quoted}\ndone-SE-1"), "done-SE-1"));
    }
}
