//! `nul_tail`: power loss after the file grew but before its data blocks
//! were written (claude-code #49876: resume silently stopped at the NUL
//! block): [`NULS`] NUL bytes after the last record, with no newline. Every
//! record is intact; the next append must start on a line of its own.

use serde::{Deserialize, Serialize};

use super::DamageKind;

/// How many NUL bytes: one filesystem block.
pub const NULS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NulTail;

impl crate::kinds::Kind for NulTail {
    const NAME: &'static str = "nul_tail";
}

impl DamageKind for NulTail {
    fn did(&self) -> &'static str {
        "appended a 4096-byte block of NULs after the last record, with no newline"
    }

    fn apply(&self, text: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = text.to_vec();
        out.resize(text.len() + NULS, 0);
        Ok(out)
    }
}
