//! `empty_answer`: the real answer emptied: no text, no tool calls, the
//! finish `stop` (a 200 that says nothing). A value fault: see the family's
//! doc.

use serde::{Deserialize, Serialize};

use crate::provider::cassette::Recorded;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmptyAnswer {}

impl crate::kinds::Kind for EmptyAnswer {
    const NAME: &'static str = "empty_answer";
}

impl super::RelayFault for EmptyAnswer {
    fn mutates(&self) -> bool {
        true
    }

    fn mutate(&self, events: &mut Vec<Recorded>) {
        super::without_content(events);
        super::set_finish(events, "stop");
    }
}
