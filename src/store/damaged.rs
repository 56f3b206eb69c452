//! A row's `store_damage` on disk: the agent's newest JSONL transcript
//! (the one the profile's glob matches that was written last) damaged in
//! place while the agent is dead ([`apply`]: the kind's bytes written
//! beside it and renamed over it, never through a symlink), and, after the
//! run, what the restarted agent wrote after the damaged tail ([`tail`]).
//! What was done is saved in the observation as a [`DamageRecord`]; the
//! oracle's `store_resumed_past_damage` judges it. SQLite and Postgres
//! stores are not damaged (the row is N/A for them: their torn tails are
//! the database's own recovery, not the agent's).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::StoreObservation;
use crate::scenarios::damage::Damage;

/// Characters of the appended bytes quoted when they fused onto the tail.
const QUOTE: usize = 120;

/// What `store_damage` did and what came of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DamageRecord {
    pub kind: Damage,
    /// What was damaged, or why nothing was.
    pub applied: Result<Applied, String>,
    /// The transcript just before the damage as chaosrun's reader sees it
    /// (a copy): what the damage could destroy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<StoreObservation>,
    /// The damaged transcript as chaosrun's reader sees it (a copy taken
    /// right after the damage): the messages still intact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<StoreObservation>,
    /// What followed the damaged tail in the transcript at the end of the
    /// run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<TailAfter>,
}

/// The damage done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The transcript, relative to HOME.
    pub file: String,
    /// What was done to it.
    pub did: String,
    /// Its length after the damage, in bytes.
    pub length: u64,
    /// The damage left it ending mid-line (no newline after its last byte).
    pub ends_mid_line: bool,
}

/// What the transcript held after the damaged tail at the end of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "was")]
pub enum TailAfter {
    /// Nothing was appended to it.
    Untouched,
    /// What was appended starts on a line of its own.
    OwnLine,
    /// The damaged last line with what was appended reads as one whole
    /// JSON record (the agent rewrote the transcript, or wrote the torn
    /// record again from its start): nothing was fused.
    Completed,
    /// What was appended continues the damaged last line, which does not
    /// read as a record (quoted, NULs as `\0`).
    Fused { appended: String },
    /// The file no longer starts with the damaged bytes (rewritten,
    /// truncated or replaced).
    Rewritten,
    /// It could not be read back.
    Unreadable { why: String },
}

/// The transcript damaged: where (inside HOME) and its bytes after.
#[derive(Debug, Clone)]
pub struct Damaged {
    pub rel: PathBuf,
    pub bytes: Vec<u8>,
}

/// Damage the newest transcript `pattern` matches inside `home` with
/// `kind`; what was done, and the damaged bytes (kept to compare the tail
/// with at the end), or why it could not be done.
pub fn apply(home: &Path, pattern: &Path, kind: Damage) -> Result<(Applied, Damaged), String> {
    let (found, _) = super::glob::find(home, pattern)?;
    let newest = found
        .iter()
        .filter_map(|p| Some((p.symlink_metadata().ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p.clone())
        .ok_or_else(|| format!("no transcript matches {}", pattern.display()))?;
    let rel = newest
        .strip_prefix(home)
        .map_err(|_| format!("{} is not inside HOME", newest.display()))?
        .to_path_buf();
    let limit = super::at_kill::MAX_COPY_BYTES;
    let text = crate::output::read_beneath(home, &rel, limit)
        .map_err(|e| format!("{}: {e}", newest.display()))?;
    let bytes = kind
        .apply(&text)
        .map_err(|e| format!("{}: {e}", rel.display()))?;
    crate::output::write_run_file(home, &rel, &bytes)
        .map_err(|e| format!("{}: {e}", newest.display()))?;
    let applied = Applied {
        file: rel.display().to_string(),
        did: kind.did().to_string(),
        length: bytes.len() as u64,
        ends_mid_line: bytes.last().is_some_and(|b| *b != b'\n'),
    };
    Ok((applied, Damaged { rel, bytes }))
}

/// What the transcript at `home/damaged.rel` holds after the damaged bytes
/// now.
pub fn tail(home: &Path, damaged: &Damaged) -> TailAfter {
    let limit = super::at_kill::MAX_COPY_BYTES;
    let now = match crate::output::read_beneath(home, &damaged.rel, limit) {
        Ok(b) => b,
        Err(e) => return TailAfter::Unreadable { why: e.to_string() },
    };
    classify(&damaged.bytes, &now)
}

/// [`tail`] on the bytes: `was` (after the damage) against `now`.
fn classify(was: &[u8], now: &[u8]) -> TailAfter {
    let Some(appended) = now.strip_prefix(was) else {
        return TailAfter::Rewritten;
    };
    match appended.first() {
        None => TailAfter::Untouched,
        Some(b'\n') => TailAfter::OwnLine,
        Some(_) if was.last().is_none_or(|b| *b == b'\n') => TailAfter::OwnLine,
        Some(_) if whole_record(was, appended) => TailAfter::Completed,
        Some(_) => TailAfter::Fused {
            appended: String::from_utf8_lossy(appended)
                .chars()
                .take(QUOTE)
                .map(|c| {
                    if c == '\0' {
                        "\\0".to_string()
                    } else {
                        c.to_string()
                    }
                })
                .collect(),
        },
    }
}

/// The last line of `was` continued by `appended` up to its first newline
/// is one JSON object.
fn whole_record(was: &[u8], appended: &[u8]) -> bool {
    let start = was.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let end = appended
        .iter()
        .position(|b| *b == b'\n')
        .unwrap_or(appended.len());
    let mut line = was[start..].to_vec();
    line.extend_from_slice(&appended[..end]);
    serde_json::from_slice::<serde_json::Value>(&line).is_ok_and(|v| v.is_object())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_after_the_damage_is_told_apart() {
        let was = b"{\"a\":1}\n{\"b\"";
        assert_eq!(classify(was, was), TailAfter::Untouched);
        assert_eq!(
            classify(was, b"{\"a\":1}\n{\"b\"\n{}\n"),
            TailAfter::OwnLine
        );
        assert_eq!(
            classify(was, b"{\"a\":1}\n{\"b\"{\"c\":2}\n"),
            TailAfter::Fused {
                appended: "{\"c\":2}\n".into()
            }
        );
        assert_eq!(classify(was, b"{\"a\":1}\n"), TailAfter::Rewritten);
        // The torn record written again from its start: the line is whole.
        assert_eq!(
            classify(was, b"{\"a\":1}\n{\"b\":2}\n{}\n"),
            TailAfter::Completed
        );
        assert_eq!(classify(b"{}\n", b"{}\n{}\n"), TailAfter::OwnLine);
    }

    #[test]
    fn the_newest_transcript_is_damaged_in_place_and_a_link_is_refused() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("s");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("a.jsonl"), "{\"x\":1}\n{\"y\":2}\n").unwrap();
        let pattern = home.path().join("s/*.jsonl");
        let (applied, damaged) = apply(home.path(), &pattern, Damage::TruncateLast).unwrap();
        assert_eq!(applied.file, "s/a.jsonl");
        assert!(applied.ends_mid_line);
        assert_eq!(
            std::fs::read(dir.join("a.jsonl")).unwrap(),
            b"{\"x\":1}\n{\"y\""
        );
        assert_eq!(tail(home.path(), &damaged), TailAfter::Untouched);
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("b.jsonl"), "{}\n").unwrap();
        std::fs::remove_file(dir.join("a.jsonl")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("b.jsonl"), dir.join("b.jsonl")).unwrap();
        assert!(apply(home.path(), &pattern, Damage::NulTail).is_err());
        assert_eq!(
            std::fs::read(outside.path().join("b.jsonl")).unwrap(),
            b"{}\n"
        );
    }
}
