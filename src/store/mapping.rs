//! The JSONL record mapping: data in the profile, not code. A list of
//! rules; the first whose `when` matches a record decides what it is (a
//! message of a role, with text, tool calls and the tool results it carries,
//! or nothing). Field paths are dotted, `*` takes every element of a list.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::items::Draft;

/// Where a record's tool calls or tool results live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parts {
    /// Path from the record to a list of parts (or to one part); `.` is the
    /// record itself.
    pub path: String,
    /// Only the parts whose fields have these values.
    #[serde(default)]
    pub when: BTreeMap<String, Value>,
    /// Path from a part to its id (a call's own id; a result: the call's id
    /// it answers). Absent or empty: the placeholder the oracle names.
    pub id: String,
    /// The id is what follows the first `id_after` in it (Gemini CLI stores
    /// the wire's `call_1` as `run_shell_command__call_1`: `id_after: "__"`);
    /// an id without it is taken whole.
    #[serde(default)]
    pub id_after: Option<String>,
    /// Results: path from a part to its output text.
    #[serde(default)]
    pub text: Option<String>,
}

/// A rule's `text`: a path, or the parts at a path that match, and where
/// each keeps its text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TextSel {
    Path(String),
    Parts {
        path: String,
        #[serde(default)]
        when: BTreeMap<String, Value>,
        field: String,
    },
}

/// One rule of a JSONL mapping: which records it takes, and where their
/// role, text, tool calls and tool results are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordRule {
    /// Field path → value (a list: any of them); every pair must match.
    #[serde(default)]
    pub when: BTreeMap<String, Value>,
    /// The role, literally (`user`, `assistant`, `system`, `tool`).
    #[serde(default)]
    pub role: Option<String>,
    /// Or the path of the record's role field.
    #[serde(default)]
    pub role_path: Option<String>,
    /// Where the text is: a path (a string, or a list of blocks whose text
    /// parts, strings or objects' `text`, thoughts left out, are joined), or
    /// `{path, when, field}`: the parts at `path` matching `when`, each one's
    /// `field` (pydantic-ai's `content` of its `text` parts only).
    #[serde(default)]
    pub text: Option<TextSel>,
    #[serde(default)]
    pub calls: Option<Parts>,
    #[serde(default)]
    pub results: Option<Parts>,
    /// The records this rule matches are not messages (metadata, sidechains).
    #[serde(default)]
    pub skip: bool,
}

/// A mapping's rules make sense (checked when the profile loads).
pub fn check_rules(rules: &[RecordRule]) -> Result<(), String> {
    if rules.is_empty() {
        return Err(
            "a `jsonl` store needs `records`: rules mapping transcript records to messages".into(),
        );
    }
    for (i, r) in rules.iter().enumerate() {
        if !r.skip && r.role.is_some() == r.role_path.is_some() {
            return Err(format!(
                "`store.records[{i}]` takes one of `role` (a literal) or `role_path` (a field path)"
            ));
        }
        if let Some(p) = r.results.as_ref().filter(|p| p.text.is_none()) {
            return Err(format!(
                "`store.records[{i}].results` needs `text`: the path of the output in each result part at `{}`",
                p.path
            ));
        }
    }
    Ok(())
}

/// The values at `path` (`a.b`, `*` for every element of a list, a number
/// for one element; `.` or empty: `v` itself).
pub fn at<'a>(v: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut cur = vec![v];
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        cur = cur
            .into_iter()
            .flat_map(|v| -> Vec<&Value> {
                match (seg, v) {
                    ("*", Value::Array(a)) => a.iter().collect(),
                    (_, Value::Array(a)) => seg
                        .parse::<usize>()
                        .ok()
                        .and_then(|i| a.get(i))
                        .into_iter()
                        .collect(),
                    (_, Value::Object(o)) => o.get(seg).into_iter().collect(),
                    _ => Vec::new(),
                }
            })
            .collect();
    }
    cur
}

fn is_thought(o: &serde_json::Map<String, Value>) -> bool {
    o.get("thought").and_then(Value::as_bool) == Some(true)
        || matches!(
            o.get("type").and_then(Value::as_str),
            Some("thinking" | "redacted_thinking" | "reasoning")
        )
}

/// The text of a value: a string; a list's strings and objects' `text`
/// joined by newlines (thoughts left out); an object's `text`, or the object
/// as JSON when it has none.
pub fn text_of(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) if !is_thought(o) => o.get("text").and_then(Value::as_str),
                _ => None,
            })
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(o) if is_thought(o) => String::new(),
        Value::Object(o) => match o.get("text").and_then(Value::as_str) {
            Some(t) => t.to_string(),
            None => v.to_string(),
        },
        other => other.to_string(),
    }
}

fn when_matches(when: &BTreeMap<String, Value>, v: &Value) -> bool {
    when.iter().all(|(path, want)| {
        let got = at(v, path);
        let got = got.first().copied().unwrap_or(&Value::Null);
        match want {
            Value::Array(any) => any.contains(got),
            one => one == got,
        }
    })
}

fn parts<'a>(rec: &'a Value, p: &Parts) -> Vec<&'a Value> {
    at(rec, &p.path)
        .into_iter()
        .flat_map(|v| match v {
            Value::Array(a) => a.iter().collect::<Vec<_>>(),
            other => vec![other],
        })
        .filter(|part| when_matches(&p.when, part))
        .collect()
}

fn id_of(part: &Value, p: &Parts) -> String {
    let id = at(part, &p.id)
        .first()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        })
        .unwrap_or_default();
    match p.id_after.as_deref().filter(|sep| !sep.is_empty()) {
        Some(sep) => match id.split_once(sep) {
            Some((_, rest)) => rest.to_string(),
            None => id,
        },
        None => id,
    }
}

/// Apply the first matching rule to `rec`. `None`: no rule matched.
pub(crate) fn apply(rules: &[RecordRule], rec: &Value, out: &mut Vec<Draft>) -> Option<()> {
    let rule = rules.iter().find(|r| when_matches(&r.when, rec))?;
    if rule.skip {
        return Some(());
    }
    let role = match (&rule.role, &rule.role_path) {
        (Some(r), _) => r.clone(),
        (None, Some(p)) => at(rec, p).first().map(|v| text_of(v)).unwrap_or_default(),
        (None, None) => return Some(()),
    };
    let mut msg = Draft::new(&role);
    match &rule.text {
        Some(TextSel::Path(p)) => {
            for v in at(rec, p) {
                msg.push_text(&text_of(v));
            }
        }
        Some(TextSel::Parts { path, when, field }) => {
            let sel = Parts {
                path: path.clone(),
                when: when.clone(),
                id: String::new(),
                id_after: None,
                text: None,
            };
            for part in parts(rec, &sel) {
                for v in at(part, field) {
                    msg.push_text(&text_of(v));
                }
            }
        }
        None => {}
    }
    if let Some(c) = &rule.calls {
        msg.call_ids = parts(rec, c).iter().map(|p| id_of(p, c)).collect();
    }
    let results: Vec<Draft> = rule
        .results
        .as_ref()
        .map(|r| {
            parts(rec, r)
                .iter()
                .filter_map(|p| {
                    // A part with nothing at its text path is no result (a
                    // call recorded before its output, Gemini CLI's).
                    let out = at(p, r.text.as_deref().unwrap_or("."));
                    if out.is_empty() || out.iter().all(|v| v.is_null()) {
                        return None;
                    }
                    let mut d = Draft::new("tool");
                    d.tool_call_id = Some(id_of(p, r));
                    for v in out {
                        d.push_text(&text_of(v));
                    }
                    Some(d)
                })
                .collect()
        })
        .unwrap_or_default();
    // A record's own calls come before its results (Gemini CLI keeps both in
    // one record); otherwise results answer the turn before, so they come
    // before the record's own text (Claude Code's user record).
    if !msg.call_ids.is_empty() {
        out.push(msg);
        out.extend(results);
    } else {
        out.extend(results);
        if !msg.is_empty() {
            out.push(msg);
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_walk_objects_lists_and_stars() {
        let v = json!({"a": {"b": [{"c": 1}, {"c": 2}, {"d": 3}]}});
        assert_eq!(at(&v, "a.b.*.c"), [&json!(1), &json!(2)]);
        assert_eq!(at(&v, "a.b.1.c"), [&json!(2)]);
        assert_eq!(at(&v, "."), [&v]);
        assert!(at(&v, "a.x").is_empty());
    }

    #[test]
    fn id_after_takes_the_wire_id_out_of_a_prefixed_one() {
        let p: Parts = serde_yaml::from_str("{path: ., id: id, id_after: \"__\"}").unwrap();
        assert_eq!(
            id_of(&json!({"id": "run_shell_command__call_1"}), &p),
            "call_1"
        );
        assert_eq!(id_of(&json!({"id": "call_2"}), &p), "call_2");
        assert_eq!(id_of(&json!({}), &p), "");
    }

    #[test]
    fn a_filtered_text_takes_only_the_matching_parts() {
        let rules: Vec<RecordRule> = serde_yaml::from_str(
            "- when: {kind: response}\n  role: assistant\n  text: {path: parts, when: {part_kind: text}, field: content}\n",
        )
        .unwrap();
        let rec = json!({"kind": "response", "parts": [
            {"part_kind": "thinking", "content": "secret plan"},
            {"part_kind": "text", "content": "hello"},
            {"part_kind": "tool-call", "tool_call_id": "c1"},
            {"part_kind": "text", "content": "world"}
        ]});
        let mut out = Vec::new();
        apply(&rules, &rec, &mut out).unwrap();
        let m = out.pop().unwrap().finish();
        assert_eq!(m.content, "hello\nworld");
        // A plain path still reads every `content`, thoughts included.
        let rules: Vec<RecordRule> =
            serde_yaml::from_str("- role: assistant\n  text: parts.*.content\n").unwrap();
        let mut out = Vec::new();
        apply(&rules, &rec, &mut out).unwrap();
        assert_eq!(
            out.pop().unwrap().finish().content,
            "secret plan\nhello\nworld"
        );
    }

    #[test]
    fn text_joins_text_parts_and_leaves_thoughts_out() {
        let blocks = json!([
            {"type": "thinking", "thinking": "t"},
            {"text": "plan", "thought": true},
            {"type": "text", "text": "a"},
            "b",
            {"type": "tool_use", "id": "x"}
        ]);
        assert_eq!(text_of(&blocks), "a\nb");
        assert_eq!(
            text_of(&json!({"content": "x", "success": true})),
            r#"{"content":"x","success":true}"#
        );
    }
}
