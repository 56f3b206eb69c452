//! `drop_tool_calls`: the real answer's tool calls dropped on the way, its
//! text kept and its finish `tool_calls` (a tool-calls finish that carries
//! none, as a proxy that strips them leaves it). A value fault: see the
//! family's doc.

use serde::{Deserialize, Serialize};

use crate::provider::cassette::Recorded;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DropToolCalls {}

impl crate::kinds::Kind for DropToolCalls {
    const NAME: &'static str = "drop_tool_calls";
}

impl super::RelayFault for DropToolCalls {
    fn mutates(&self) -> bool {
        true
    }

    fn mutate(&self, events: &mut Vec<Recorded>) {
        events.retain(|e| !matches!(e, Recorded::ToolCall { .. }));
        super::set_finish(events, "tool_calls");
    }
}
