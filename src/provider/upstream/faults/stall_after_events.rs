//! `stall_after_events`: relay the first `events` events of the real reply,
//! then keep the socket open and silent for `seconds` (an hour by default, or
//! until shutdown), then cut. A reply with fewer events is relayed whole except
//! its end: the stall comes before the body closes.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StallAfterEvents {
    #[serde(deserialize_with = "crate::units::count_1")]
    pub events: usize,
    #[serde(
        default = "crate::provider::replies::fault_seconds",
        deserialize_with = "crate::units::seconds"
    )]
    pub seconds: f64,
}

impl StallAfterEvents {
    pub(crate) fn after(&self) -> (usize, std::time::Duration) {
        (self.events, crate::provider::replies::secs(self.seconds))
    }
}
