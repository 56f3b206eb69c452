//! `concurrent_append`: a second process appending to the same session
//! (codex #24425: a partial record, then the same record whole): the first
//! half of a copy of the last record, then the whole copy on a line of its
//! own. Every record is intact (the copy too); the torn half is one
//! malformed line between them. Needs one record.

use serde::{Deserialize, Serialize};

use super::{records, too_few, DamageKind};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ConcurrentAppend;

impl crate::kinds::Kind for ConcurrentAppend {
    const NAME: &'static str = "concurrent_append";
}

impl DamageKind for ConcurrentAppend {
    fn did(&self) -> &'static str {
        "appended the first half of a copy of the last record, then the whole copy on the next line"
    }

    fn apply(&self, text: &[u8]) -> Result<Vec<u8>, String> {
        let recs = records(text);
        let &(start, end) = recs.last().ok_or_else(|| too_few(1, 0))?;
        let mut out = text.to_vec();
        if out.last() != Some(&b'\n') {
            out.push(b'\n');
        }
        let copy = &text[start..end];
        out.extend_from_slice(&copy[..copy.len().div_ceil(2)]);
        out.push(b'\n');
        out.extend_from_slice(copy);
        out.push(b'\n');
        Ok(out)
    }
}
