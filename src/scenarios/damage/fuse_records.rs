//! `fuse_records`: two records written onto one line (copilot-cli #4098):
//! the newline between the second and the third record is removed, so
//! those two read as one malformed line (in the rows' transcript, a turn's
//! tool call and its result: lost together) and the records from the
//! fourth on, intact, come after the damage (a resume that stops at the
//! first bad line loses them). Needs four records.

use serde::{Deserialize, Serialize};

use super::{records, too_few, DamageKind};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FuseRecords;

impl crate::kinds::Kind for FuseRecords {
    const NAME: &'static str = "fuse_records";
}

impl DamageKind for FuseRecords {
    fn did(&self) -> &'static str {
        "fused the second and the third record onto one line"
    }

    fn apply(&self, text: &[u8]) -> Result<Vec<u8>, String> {
        let recs = records(text);
        if recs.len() < 4 {
            return Err(too_few(4, recs.len()));
        }
        let (end, next) = (recs[1].1, recs[2].0);
        let mut out = text[..end].to_vec();
        out.extend_from_slice(&text[next..]);
        Ok(out)
    }
}
