//! `files_written`: every `write_file` call the row's model asks for (the
//! logical tool, `tools.write_file` in the profile) must leave its file in
//! the scenario's work dir holding the content asked for, by the end of the
//! run: an agent that reports a write and leaves no file, or whose write
//! fails on a new file (Gemini CLI over ACP reads the missing file first
//! through the editor and takes the answer as an error), fails it. Pure over
//! the files the collector read back ([`Observation::files`]); made only for
//! a row that calls `write_file`, `not checked` when the call was never
//! handed to the agent or the file was not read back.

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::provider::CallKind;
use crate::scenarios::Scenario;

pub const NAME: &str = "files_written";

/// The logical tool whose calls this check judges.
pub const TOOL: &str = "write_file";

/// One `write_file` call of the row: the responder rule that makes it, and
/// its path and content with `{{nonce}}` rendered.
pub struct Asked {
    pub rule: usize,
    pub path: String,
    pub content: String,
}

/// Every `write_file` call the row's responder can make: what the collector
/// reads back after the run, and what this check expects there.
pub fn asked(s: &Scenario, nonce: &str) -> Vec<Asked> {
    let arg = |args: &serde_json::Value, k: &str| {
        args.get(k)
            .and_then(serde_json::Value::as_str)
            .map(|v| v.replace("{{nonce}}", nonce))
    };
    let mut out = Vec::new();
    for (rule, r) in s.responder.iter().enumerate() {
        for c in r.reply.tool_calls().iter().filter(|c| c.tool == TOOL) {
            if let (Some(path), Some(content)) = (arg(&c.args, "path"), arg(&c.args, "content")) {
                out.push(Asked {
                    rule,
                    path,
                    content,
                });
            }
        }
    }
    out
}

/// Whether the rule that makes the call answered one of the agent's model
/// calls (the call was handed to the agent).
fn handed_over(obs: &Observation, rule: usize) -> bool {
    obs.recording
        .requests
        .iter()
        .any(|r| r.kind != CallKind::Aux && r.rule == Some(rule))
}

pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    let asked = asked(s, &obs.nonce);
    if asked.is_empty() {
        return None;
    }
    let inv = Invariant::SideEffects;
    let mut v = Vec::new();
    for Asked {
        rule,
        path,
        content,
    } in &asked
    {
        let Some(left) = obs.files.iter().find(|f| &f.path == path) else {
            return Some(Check::skipped(
                inv,
                NAME,
                format!("{path} was not read back after the run"),
            ));
        };
        match (&left.content, &left.error) {
            (Some(c), _) if c == content => {}
            (Some(c), _) => v.push(format!(
                "the model asked `write_file` to write {path} with {content:?}; after the run it holds {:?}",
                super::clip(c, 200)
            )),
            (None, _) if !handed_over(obs, *rule) => {
                return Some(Check::skipped(
                    inv,
                    NAME,
                    format!("the `write_file` call for {path} was never handed to the agent"),
                ))
            }
            (None, err) => v.push(format!(
                "the model asked `write_file` to write {path}; after the run there is no such file in the work dir ({})",
                err.as_deref().unwrap_or("not found")
            )),
        }
    }
    Some(Check::new(inv, NAME, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::FileLeft;

    const ROW: &str = "scenarios:\n  - id: w\n    responder:\n      - when: {after_tool: false}\n        reply: {kind: tool_call, calls: [{tool: write_file, args: {path: \"n-{{nonce}}.txt\", content: \"hi {{nonce}}\"}}]}\n      - reply: {kind: text, text: done}\n    expect: ended\n";

    fn row() -> Scenario {
        crate::scenarios::load_str(ROW, "t.yaml")
            .unwrap()
            .scenarios
            .remove(0)
    }

    fn obs(content: Option<&str>, handed: bool) -> Observation {
        let mut o = Observation {
            nonce: "N1".into(),
            ..Default::default()
        };
        o.files.push(FileLeft {
            path: "n-N1.txt".into(),
            content: content.map(str::to_string),
            error: content.is_none().then(|| "no such file".to_string()),
        });
        if handed {
            let mut r = crate::oracle::fixtures::request(0, CallKind::Main, vec![]);
            r.rule = Some(0);
            o.recording.requests.push(r);
        }
        o
    }

    #[test]
    fn the_file_must_hold_the_content_asked_for() {
        let s = row();
        let a = asked(&s, "N1");
        assert_eq!(
            (
                a.len(),
                a[0].rule,
                a[0].path.as_str(),
                a[0].content.as_str()
            ),
            (1, 0, "n-N1.txt", "hi N1")
        );
        let ok = check(&s, &obs(Some("hi N1"), true)).unwrap();
        assert_eq!(ok.status, crate::oracle::Status::Pass);
        let wrong = check(&s, &obs(Some("other"), true)).unwrap();
        assert!(
            wrong.violations()[0].contains("holds \"other\""),
            "{wrong:?}"
        );
        let missing = check(&s, &obs(None, true)).unwrap();
        assert!(
            missing.violations()[0].contains("no such file in the work dir (no such file)"),
            "{missing:?}"
        );
        // Never handed to the agent: nothing to judge.
        assert!(check(&s, &obs(None, false)).unwrap().not_checked());
        // Not read back: not a pass.
        let mut unread = obs(Some("hi N1"), true);
        unread.files.clear();
        assert!(check(&s, &unread).unwrap().not_checked());
    }

    #[test]
    fn a_row_without_write_file_has_no_such_check() {
        let s = crate::scenarios::load_str(
            "scenarios:\n  - id: t\n    responder:\n      - reply: {kind: text, text: hi}\n    expect: ended\n",
            "t.yaml",
        )
        .unwrap()
        .scenarios
        .remove(0);
        assert!(check(&s, &obs(None, true)).is_none());
    }
}
