//! `truncate_last`: power loss mid-append (copilot-cli #1864): the last
//! record is cut to its first half and the transcript ends there, with no
//! newline. Every record before it is intact; the next append must start on
//! a line of its own.

use serde::{Deserialize, Serialize};

use super::{records, too_few, DamageKind};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TruncateLast;

impl crate::kinds::Kind for TruncateLast {
    const NAME: &'static str = "truncate_last";
}

impl DamageKind for TruncateLast {
    fn did(&self) -> &'static str {
        "cut the last record to its first half, with no newline after it"
    }

    fn apply(&self, text: &[u8]) -> Result<Vec<u8>, String> {
        let recs = records(text);
        let &(start, end) = recs.last().ok_or_else(|| too_few(1, 0))?;
        Ok(text[..start + (end - start).div_ceil(2)].to_vec())
    }
}
