//! JSONL transcript stores: the profile's record mapping (data, not code)
//! applied to every transcript the store's glob finds in HOME. One mapping
//! shape covers Claude Code, Codex, Gemini CLI and qwen-code: a list of rules,
//! the first whose `when` matches a record deciding what the record is.
//!
//! Reads are bounded ([`MAX_FILES`], [`MAX_BYTES`], [`MAX_LINES`],
//! [`MAX_LINE_BYTES`], [`MAX_DOCUMENT_BYTES`]; what lies past a cap is
//! counted, not read); malformed
//! lines are counted and quoted, never fatal. Call it off the async workers.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::items::{turns, Draft};
use crate::observe::{StoreObservation, TranscriptRead};
use crate::profile::StoreSpec;

/// Most transcript files read.
pub const MAX_FILES: usize = 64;
/// Most bytes read over all files.
pub const MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Most lines parsed over all files.
pub const MAX_LINES: usize = 200_000;
/// Longest line parsed; a longer one is malformed.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
/// Largest single-document transcript parsed (it is parsed whole).
pub const MAX_DOCUMENT_BYTES: u64 = 16 * 1024 * 1024;
/// Malformed lines quoted in the observation.
const EXAMPLES: usize = 3;

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
    /// Results: path from a part to its output text.
    #[serde(default)]
    pub text: Option<String>,
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
    /// Path of the text: a string, or a list of blocks whose text parts
    /// (strings, objects' `text`, thoughts left out) are joined.
    #[serde(default)]
    pub text: Option<String>,
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

fn id_of(part: &Value, path: &str) -> String {
    at(part, path)
        .first()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// Apply the first matching rule to `rec`. `None`: no rule matched.
fn apply(rules: &[RecordRule], rec: &Value, out: &mut Vec<Draft>) -> Option<()> {
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
    if let Some(p) = &rule.text {
        for v in at(rec, p) {
            msg.push_text(&text_of(v));
        }
    }
    if let Some(c) = &rule.calls {
        msg.call_ids = parts(rec, c).iter().map(|p| id_of(p, &c.id)).collect();
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
                    d.tool_call_id = Some(id_of(p, &r.id));
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

/// Reads within the caps, counting what is skipped.
struct Reader<'a> {
    spec: &'a StoreSpec,
    drafts: Vec<Draft>,
    read: TranscriptRead,
    bytes: u64,
    lines: usize,
    matched: usize,
}

impl Reader<'_> {
    fn malformed(&mut self, file: &Path, line: usize, why: &str) {
        self.read.malformed += 1;
        if self.read.malformed_examples.len() < EXAMPLES {
            self.read
                .malformed_examples
                .push(format!("{}:{line}: {why}", file.display()));
        }
    }

    fn record(&mut self, file: &Path, line: usize, rec: &Value) {
        self.read.records += 1;
        if !rec.is_object() {
            return self.malformed(file, line, "not a JSON object");
        }
        if apply(&self.spec.records, rec, &mut self.drafts).is_some() {
            self.matched += 1;
        }
    }

    fn file(&mut self, path: &Path) {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let budget = MAX_BYTES.saturating_sub(self.bytes);
        if budget == 0 {
            self.read.unread_bytes += size;
            return;
        }
        let Ok(f) = std::fs::File::open(path) else {
            return self.malformed(path, 0, "cannot be opened");
        };
        let mut r = BufReader::new(f.take(budget));
        if let Some(doc) = &self.spec.document {
            if size > MAX_DOCUMENT_BYTES.min(budget) {
                self.read.unread_bytes += size;
                return self.malformed(
                    path,
                    0,
                    &format!(
                        "a document larger than {} bytes is not read",
                        MAX_DOCUMENT_BYTES.min(budget)
                    ),
                );
            }
            let mut buf = Vec::new();
            let n = r.read_to_end(&mut buf).unwrap_or(0) as u64;
            self.bytes += n;
            self.read.unread_bytes += size.saturating_sub(n);
            match serde_json::from_slice::<Value>(&buf) {
                Ok(v) => {
                    let recs: Vec<Value> = at(&v, doc)
                        .into_iter()
                        .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                        .collect();
                    for (i, rec) in recs.iter().enumerate() {
                        self.record(path, i + 1, rec);
                    }
                }
                Err(e) => self.malformed(path, 1, &format!("not one JSON document: {e}")),
            }
            return;
        }
        let mut n = 0usize;
        let mut buf = Vec::new();
        let mut read_here = 0u64;
        loop {
            buf.clear();
            let (got, whole) = read_line(&mut r, &mut buf);
            if got == 0 {
                break;
            }
            n += 1;
            read_here += got as u64;
            self.bytes += got as u64;
            if self.lines >= MAX_LINES {
                self.read.unread_lines += 1;
                continue;
            }
            self.lines += 1;
            if !whole {
                self.malformed(path, n, &format!("line longer than {MAX_LINE_BYTES} bytes"));
                continue;
            }
            let text = String::from_utf8_lossy(&buf);
            let text = text.trim_end_matches(['\n', '\r']);
            if text.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(text) {
                Ok(v) => self.record(path, n, &v),
                Err(e) => self.malformed(path, n, &e.to_string()),
            }
        }
        self.read.unread_bytes += size.saturating_sub(read_here);
    }
}

/// Read one line into `buf`, keeping at most [`MAX_LINE_BYTES`]: (bytes
/// consumed, whether the line was kept whole).
fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>) -> (usize, bool) {
    let mut consumed = 0;
    let mut whole = true;
    loop {
        let Ok(chunk) = r.fill_buf() else {
            return (consumed, whole);
        };
        if chunk.is_empty() {
            return (consumed, whole);
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if buf.len() + take <= MAX_LINE_BYTES {
            buf.extend_from_slice(&chunk[..take]);
        } else {
            whole = false;
        }
        r.consume(take);
        consumed += take;
        if done {
            return (consumed, whole);
        }
    }
}

/// Map the transcripts at `files` (in order) through the spec's rules.
pub fn read_files(
    spec: &StoreSpec,
    files: &[PathBuf],
) -> (
    Result<Vec<crate::observe::StoredMessage>, String>,
    TranscriptRead,
) {
    let mut r = Reader {
        spec,
        drafts: Vec::new(),
        read: TranscriptRead::default(),
        bytes: 0,
        lines: 0,
        matched: 0,
    };
    for f in files.iter().take(MAX_FILES) {
        r.read.files.push(f.display().to_string());
        r.file(f);
    }
    r.read.unread_files = files.len().saturating_sub(MAX_FILES);
    let messages = if r.read.records > 0 && r.matched == 0 {
        Err(format!(
            "no record of {} read matched a rule of `store.records`",
            r.read.records
        ))
    } else {
        Ok(turns(r.drafts))
    };
    (messages, r.read)
}

/// Observe a JSONL store: the files under `home` matching `pattern`
/// (absolute, inside HOME), each resolved inside HOME right before reading.
pub fn observe(home: &Path, pattern: &Path, spec: &StoreSpec) -> StoreObservation {
    let glob = pattern.display().to_string();
    let (found, capped) = match super::glob::find(home, pattern) {
        Ok(f) => f,
        Err(error) => return StoreObservation::Unreadable { path: glob, error },
    };
    let mut files = Vec::new();
    let mut outside = Vec::new();
    for f in found {
        match crate::driver::home::resolve_inside(home, &f) {
            Ok(real) => files.push(real),
            Err(e) => outside.push(e),
        }
    }
    if files.is_empty() {
        return match outside.into_iter().next() {
            Some(error) => StoreObservation::Unreadable { path: glob, error },
            None => StoreObservation::Missing { path: glob },
        };
    }
    let (messages, mut read) = read_files(spec, &files);
    read.outside = outside;
    read.walk_capped = capped;
    StoreObservation::Jsonl {
        glob,
        read,
        messages,
    }
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

    #[test]
    fn lines_past_the_cap_are_counted_not_parsed() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("t.jsonl");
        std::fs::write(&f, "{}\n".repeat(MAX_LINES + 3)).unwrap();
        let spec: StoreSpec =
            serde_yaml::from_str("jsonl: t.jsonl\nrecords: [{when: {type: x}, role: user}]\n")
                .unwrap();
        let (_, read) = read_files(&spec, &[f]);
        assert_eq!(read.records, MAX_LINES);
        assert_eq!(read.unread_lines, 3);
        assert!(read.capped());
    }
}
