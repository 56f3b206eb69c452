//! JSONL transcript stores: the profile's record mapping ([`super::mapping`])
//! applied to every transcript the store's glob finds in HOME. One mapping
//! shape covers Claude Code, Codex, Gemini CLI and qwen-code.
//!
//! Reads are bounded ([`MAX_FILES`], [`MAX_BYTES`], [`MAX_LINES`],
//! [`MAX_LINE_BYTES`], [`MAX_DOCUMENT_BYTES`]; what lies past a cap is
//! counted, not read); malformed lines are counted and quoted, never fatal.
//! Call it off the async workers.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::items::{turns, Draft};
use super::mapping::{apply, at};
pub use super::mapping::{check_rules, text_of, Parts, RecordRule};
use super::{StoreObservation, StoreSpec, TranscriptRead};
use crate::input::{open_regular, Follow, OpenError};

/// Most transcript files read.
pub const MAX_FILES: usize = 64;
/// Most bytes read over all files.
pub const MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Most lines parsed over all files.
pub const MAX_LINES: usize = 200_000;
/// Longest line parsed; a longer one is counted as unread (a cap of
/// chaosrun's, not the agent's corruption).
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
/// Largest single-document transcript parsed (it is parsed whole).
pub const MAX_DOCUMENT_BYTES: u64 = 16 * 1024 * 1024;
/// Malformed lines quoted in the observation.
const EXAMPLES: usize = 3;

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
        // Never a blocking open (a FIFO the agent left where the glob
        // matches); only a regular file is read.
        let f = match open_regular(path, Follow::Yes) {
            Ok((f, _)) => f,
            Err(e @ OpenError::NotRegular { .. }) => {
                self.read
                    .not_regular
                    .push(format!("{} {e}", path.display()));
                return;
            }
            Err(OpenError::Io(_)) => return self.malformed(path, 0, "cannot be opened"),
        };
        let size = f.metadata().map(|m| m.len()).unwrap_or(0);
        let budget = MAX_BYTES.saturating_sub(self.bytes);
        if budget == 0 {
            self.read.unread_bytes += size;
            return;
        }
        let mut r = BufReader::new(f.take(budget));
        if let Some(doc) = &self.spec.document {
            if size > MAX_DOCUMENT_BYTES.min(budget) {
                self.read.unread_bytes += size;
                self.read.unread_files += 1;
                return;
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
                // Past chaosrun's per-line cap: unread (not the agent's
                // corruption), but named, since a record that long breaks
                // the persisted size bound.
                self.read.unread_lines += 1;
                if self.read.overlong.len() < EXAMPLES {
                    self.read
                        .overlong
                        .push(format!("{}:{n}: {got} bytes", path.display()));
                }
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
) -> (Result<Vec<super::Message>, String>, TranscriptRead) {
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
        match crate::safe_path::resolve_inside(home, &f) {
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
    if read.files.len() == read.not_regular.len() {
        // Nothing but FIFOs, devices, ...: no transcript was read at all.
        return StoreObservation::NotRegular {
            path: glob,
            why: format!(
                "matches only files that are not regular ({})",
                read.not_regular.join("; ")
            ),
        };
    }
    StoreObservation::Jsonl {
        glob,
        read,
        messages,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn an_overlong_line_is_named_not_only_counted() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("t.jsonl");
        let big = format!(
            "{{\"type\":\"x\",\"t\":\"{}\"}}\n",
            "a".repeat(MAX_LINE_BYTES)
        );
        std::fs::write(&f, format!("{{\"type\":\"x\"}}\n{big}")).unwrap();
        let spec: StoreSpec =
            serde_yaml::from_str("jsonl: t.jsonl\nrecords: [{when: {type: x}, role: user}]\n")
                .unwrap();
        let (_, read) = read_files(&spec, &[f]);
        assert_eq!((read.malformed, read.unread_lines), (0, 1), "{read:?}");
        assert_eq!(read.overlong.len(), 1, "{read:?}");
        assert!(
            read.overlong[0].ends_with(&format!(":2: {} bytes", big.len())),
            "{read:?}"
        );
    }
}
