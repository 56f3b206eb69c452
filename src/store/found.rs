//! What reading the agent's store back found: its messages in the one
//! message model ([`Message`], persisted), and how the read went
//! ([`StoreObservation`], [`TranscriptRead`]). Saved in the observation.

use serde::{Deserialize, Serialize};

use crate::message::Message;

/// Whether a persisted tool-call id is a placeholder rather than an id
/// (empty, missing, `__fake_id__` and the like, which many SDKs store):
/// pairing by it is no evidence.
pub fn is_placeholder_id(id: &str) -> bool {
    let t = id.trim().to_ascii_lowercase();
    t.is_empty()
        || t == "<missing id>"
        || t.contains("fake_id")
        || t.contains("fake-id")
        || matches!(t.as_str(), "null" | "none" | "undefined")
}

/// What chaosrun found in the agent's durable store.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum StoreObservation {
    /// The profile names no store.
    #[default]
    NotConfigured,
    /// The profile names one, but the file was not there.
    Missing { path: String },
    /// The file could not be opened (integrity unknown).
    Unreadable { path: String, error: String },
    /// It exists but is not a regular file (a FIFO, a device, a directory),
    /// or a glob matched only such files: never read, so nothing about the
    /// store is checked. `why` completes "the store PATH …".
    NotRegular { path: String, why: String },
    /// Opened: `integrity` is `PRAGMA integrity_check`'s answer; `messages` is
    /// the profile query's rows, or the query's error.
    Read {
        path: String,
        integrity: String,
        messages: Result<Vec<Message>, String>,
    },
    /// A Postgres store (worker mode): its messages, or why they could not be
    /// read. It has no integrity check of SQLite's kind.
    Postgres {
        dsn: String,
        messages: Result<Vec<Message>, String>,
    },
    /// JSONL transcripts (the glob under HOME): the profile mapping's
    /// messages (or why none could be made), and what the bounded read saw.
    /// No integrity check of SQLite's kind.
    Jsonl {
        glob: String,
        read: TranscriptRead,
        messages: Result<Vec<Message>, String>,
    },
}

/// What reading a JSONL store saw: files, records, malformed lines (counted
/// and quoted, never fatal), and what lay past the read caps (counted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TranscriptRead {
    pub files: Vec<String>,
    pub records: usize,
    pub malformed: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub malformed_examples: Vec<String>,
    /// Lines longer than the reader's line cap (`file:line: N bytes`, the
    /// first few): each holds a record larger than any persisted-size bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlong: Vec<String>,
    /// Matches of the glob that resolve outside HOME (not read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside: Vec<String>,
    /// Matches that are not regular files (`PATH is a fifo`): never opened
    /// for a blocking read, never read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_regular: Vec<String>,
    #[serde(default)]
    pub unread_files: usize,
    #[serde(default)]
    pub unread_lines: usize,
    #[serde(default)]
    pub unread_bytes: u64,
    /// The directory walk stopped at its entry cap.
    #[serde(default)]
    pub walk_capped: bool,
}

impl TranscriptRead {
    /// Whether a read cap left part of the transcripts unread.
    pub fn capped(&self) -> bool {
        self.unread_files + self.unread_lines > 0 || self.unread_bytes > 0 || self.walk_capped
    }

    /// Whether some of what the glob matched was not read (a cap, a file
    /// outside HOME, one that is not a regular file).
    pub fn partial(&self) -> bool {
        self.capped() || !self.outside.is_empty() || !self.not_regular.is_empty()
    }

    /// What the read left out, for a report line (empty when nothing).
    pub fn caveats(&self) -> String {
        let mut out = Vec::new();
        if self.malformed > 0 {
            out.push(format!(
                "{} malformed line(s) skipped ({})",
                self.malformed,
                self.malformed_examples.join("; ")
            ));
        }
        if self.capped() {
            out.push(format!(
                "read capped: {} file(s), {} line(s), {} byte(s) not read{}",
                self.unread_files,
                self.unread_lines,
                self.unread_bytes,
                if self.walk_capped {
                    ", directory walk capped"
                } else {
                    ""
                }
            ));
        }
        if !self.outside.is_empty() {
            out.push(format!(
                "not read, outside HOME: {}",
                self.outside.join("; ")
            ));
        }
        if !self.not_regular.is_empty() {
            out.push(format!(
                "not read, not a regular file: {}",
                self.not_regular.join("; ")
            ));
        }
        out.join("; ")
    }
}

impl StoreObservation {
    /// The session's messages, when they could be read.
    pub fn messages(&self) -> Option<&[Message]> {
        match self {
            StoreObservation::Read {
                messages: Ok(m), ..
            }
            | StoreObservation::Postgres {
                messages: Ok(m), ..
            }
            | StoreObservation::Jsonl {
                messages: Ok(m), ..
            } => Some(m),
            _ => None,
        }
    }
}
