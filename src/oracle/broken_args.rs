//! Broken arguments never run (side effects / `broken_args_never_ran`): a
//! shell tool call whose arguments were not a JSON object with a string
//! `command` (cut mid-JSON for length, the command under a wrong key, a
//! number for it) must not run. Its evidence is the side-effect journal: a
//! token that appears only in such a call's arguments (never in a
//! well-formed call's) and is in the journal was written by a command run
//! from broken arguments: the agent repaired, guessed or coerced them
//! instead of answering with an error result.
//!
//! Made only where some issued call was broken and writes to the journal
//! (its arguments name `$CHAOS_J…`, even cut); pure over the recorded calls
//! and the journal.

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::provider::recording::IssuedToolCall;
use serde_json::Value;

const NAME: &str = "broken_args_never_ran";

/// The arguments' text as the agent got it (logical names).
fn raw(c: &IssuedToolCall) -> String {
    match &c.args {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A shell call whose arguments are no object with a string `command`.
fn broken(c: &IssuedToolCall) -> bool {
    if c.tool != "shell" {
        return false;
    }
    let parsed = match &c.args {
        Value::String(s) => serde_json::from_str::<Value>(s).ok(),
        other => Some(other.clone()),
    };
    !parsed.is_some_and(|v| v.get("command").is_some_and(Value::is_string))
}

/// Journal tokens (side-effect lines, heartbeats aside).
fn tokens(obs: &Observation) -> Vec<&str> {
    obs.journal
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty() && !l.starts_with("bg "))
        .collect()
}

/// The check, where a broken call carries a journal-like token (`None`
/// elsewhere).
pub fn check(obs: &Observation) -> Option<Check> {
    let calls = &obs.recording.issued_tool_calls;
    let (bad, good): (Vec<_>, Vec<_>) = calls.iter().partition(|c| broken(c));
    // `$CHAOS_J`: the journal's variable, even where the cut fell in it.
    if !bad.iter().any(|c| raw(c).contains("$CHAOS_J")) {
        return None;
    }
    let good: Vec<String> = good.iter().map(|c| raw(c)).collect();
    let mut v = Vec::new();
    for t in tokens(obs) {
        if good.iter().any(|g| g.contains(t)) {
            continue;
        }
        let carriers: Vec<&&IssuedToolCall> = bad.iter().filter(|c| raw(c).contains(t)).collect();
        if let Some(first) = carriers.first() {
            let ids: Vec<&str> = carriers.iter().map(|c| c.id.as_str()).collect();
            v.push(format!(
                "side effect {t} is in the journal, and only tool calls with broken arguments carried it ({}; {}): one of them ran",
                ids.join(", "),
                super::clip(&raw(first), 120)
            ));
        }
    }
    v.dedup();
    let cut = (obs.capped.journal_read < obs.capped.journal_bytes).then(|| {
        format!(
            "chaosrun read {} of the journal's {} bytes (its cap): no such side effect in what was read",
            obs.capped.journal_read, obs.capped.journal_bytes
        )
    });
    Some(super::unless_partial(
        Check::new(Invariant::SideEffects, NAME, v),
        cut,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::fixtures::{end, healthy, scenario};
    use serde_json::json;

    fn issued(id: &str, args: Value) -> IssuedToolCall {
        IssuedToolCall {
            id: id.into(),
            tool: "shell".into(),
            args,
            main_index: 0,
        }
    }

    fn observed(calls: Vec<IssuedToolCall>, journal: &[&str]) -> Observation {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "done"));
        o.recording.issued_tool_calls = calls;
        o.journal = journal.iter().map(|l| l.to_string()).collect();
        o
    }

    const WRONG_KEY: &str = r#"{"command_text": "echo WK-1 >> \"$CHAOS_JOURNAL\""}"#;
    const CUT: &str = r#"{"command": "echo CUT-1 >> \"$CHAOS_JOUR"#;

    #[test]
    fn a_side_effect_of_broken_arguments_fails() {
        for args in [json!(WRONG_KEY), json!(CUT)] {
            let token = if args.as_str().unwrap().contains("WK-1") {
                "WK-1"
            } else {
                "CUT-1"
            };
            let o = observed(vec![issued("c1", args)], &[token]);
            let c = check(&o).expect("a broken call carries a token");
            assert!(c.failed(), "{c:?}");
            assert!(
                c.violations()[0].contains(&format!("side effect {token}")),
                "{c:?}"
            );
            assert!(c.violations()[0].contains("carried it (c1;"), "{c:?}");
        }
    }

    #[test]
    fn broken_arguments_answered_with_an_error_pass() {
        let o = observed(vec![issued("c1", json!(WRONG_KEY))], &[]);
        assert!(!check(&o).unwrap().failed());
        // A well-formed call with the same token is the one that wrote it.
        let good = issued("c2", json!({"command": "echo WK-1 >> \"$CHAOS_JOURNAL\""}));
        let o = observed(vec![issued("c1", json!(WRONG_KEY)), good], &["WK-1"]);
        assert!(!check(&o).unwrap().failed());
    }

    #[test]
    fn a_number_for_the_command_is_broken_and_rows_without_one_are_not_judged() {
        assert!(broken(&issued("c", json!({"command": 42}))));
        assert!(!broken(&issued("c", json!({"command": "ls"}))));
        let o = observed(
            vec![issued(
                "c1",
                json!({"command": "echo A >> \"$CHAOS_JOURNAL\""}),
            )],
            &["A"],
        );
        assert!(check(&o).is_none());
    }
}
