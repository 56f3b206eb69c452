//! `duplicate_frames`: the real answer with every content frame (a text,
//! reasoning or tool-arguments delta) sent twice in a row, as a faulty
//! proxy or a client-side retry of a stream leaves it: the text doubled,
//! each tool call's arguments twice over (no longer one JSON value) on the
//! wires that stream them. The same frames as the `duplicate_frames` field
//! of the `text` and `tool_call` replies. A value fault: see the family's
//! doc.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DuplicateFrames {}

impl crate::kinds::Kind for DuplicateFrames {
    const NAME: &'static str = "duplicate_frames";
}

impl super::RelayFault for DuplicateFrames {
    fn mutates(&self) -> bool {
        true
    }

    fn duplicates_frames(&self) -> bool {
        true
    }
}
