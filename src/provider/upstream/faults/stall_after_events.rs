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

impl crate::kinds::Kind for StallAfterEvents {
    const NAME: &'static str = "stall_after_events";
}

impl super::RelayFault for StallAfterEvents {
    fn after(&self, sent: usize) -> super::Act {
        if sent >= self.events {
            self.stall()
        } else {
            super::Act::Pass
        }
    }

    fn at_end(&self) -> super::Act {
        self.stall()
    }
}

impl StallAfterEvents {
    fn stall(&self) -> super::Act {
        super::Act::HoldThenCut(crate::provider::replies::secs(self.seconds), "stalled")
    }
}
