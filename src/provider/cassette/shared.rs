//! Cassettes parsed once per process and shared: every provider replaying
//! the same file (its canonical path) gets one [`Arc`] of it while the file
//! is unchanged (same size, modification time and inode), so six rows on one
//! 49 MB cassette hold it once, not six times. A cassette loaded here keeps
//! only what replay reads (an entry's `request`, there for a reader, is
//! dropped as each line is parsed). A file [`pin`]ned (one that several rows
//! of a run replay) stays loaded for the process; any other is dropped with
//! its last provider.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

use super::Cassette;

/// What says a file is unchanged since it was parsed.
#[derive(Debug, Clone, PartialEq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    dev: u64,
    ino: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: m.len(),
        modified: m.modified().ok(),
        dev: m.dev(),
        ino: m.ino(),
    })
}

struct Slot {
    stamp: Stamp,
    cassette: Weak<Cassette>,
    pinned: Option<Arc<Cassette>>,
}

static CACHE: Mutex<Option<HashMap<PathBuf, Slot>>> = Mutex::new(None);
static PARSES: AtomicU64 = AtomicU64::new(0);

/// Cassette files parsed by this process so far.
pub fn parses() -> u64 {
    PARSES.load(Ordering::Relaxed)
}

/// The cassette at `path`, parsed now or shared with whoever holds it; the
/// error is [`super::load`]'s.
pub fn get(path: &Path) -> Result<Arc<Cassette>, String> {
    load(path, false)
}

/// [`get`], and keep it loaded for the process.
pub fn pin(path: &Path) -> Result<Arc<Cassette>, String> {
    load(path, true)
}

fn load(path: &Path, keep: bool) -> Result<Arc<Cassette>, String> {
    let (Ok(key), Some(now)) = (std::fs::canonicalize(path), stamp(path)) else {
        // Not there (or unreadable): the loader says why.
        return super::load_for_replay(path).map(Arc::new);
    };
    // Held while parsing, so that rows starting together parse it once.
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    let held = cache
        .get(&key)
        .filter(|s| s.stamp == now)
        .and_then(|s| s.cassette.upgrade());
    let cassette = match held {
        Some(c) => c,
        None => {
            PARSES.fetch_add(1, Ordering::Relaxed);
            let c = Arc::new(super::load_for_replay(path)?);
            cache.insert(
                key.clone(),
                Slot {
                    stamp: now,
                    cassette: Arc::downgrade(&c),
                    pinned: None,
                },
            );
            c
        }
    };
    if let Some(slot) = cache.get_mut(&key) {
        if keep {
            slot.pinned = Some(cassette.clone());
        }
    }
    cache.retain(|_, s| s.pinned.is_some() || s.cassette.strong_count() > 0);
    Ok(cassette)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"{"cassette":1,"wire":"openai-chat"}
{"call":0,"match":{"role":"user"},"status":200,"events":[{"type":"text","at":0.1,"text":"hi"}],"request":[{"role":"user","content":"a long history","content_chars":14}]}
"#;

    #[test]
    fn one_file_is_parsed_once_while_held_and_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        std::fs::write(&p, TEXT).unwrap();
        let a = get(&p).unwrap();
        let b = get(&dir.path().join(".").join("c.jsonl")).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "the same file is one parsed cassette");
        assert!(a.entries[0].request.is_empty(), "replay keeps no request");
        // Rewritten (another size): parsed again.
        std::fs::write(&p, TEXT.replace("\"hi\"", "\"hello\"")).unwrap();
        let c = get(&p).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.entries.len(), 1);
    }
}
