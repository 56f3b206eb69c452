//! `delay_first_byte`: call the upstream at once, then hold its reply for
//! `seconds` before the response head reaches the agent; the reply is then
//! relayed unchanged.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayFirstByte {
    #[serde(deserialize_with = "crate::units::seconds")]
    pub seconds: f64,
}

impl crate::kinds::Kind for DelayFirstByte {
    const NAME: &'static str = "delay_first_byte";
}

impl super::RelayFault for DelayFirstByte {
    fn first_byte_delay(&self) -> std::time::Duration {
        crate::provider::replies::secs(self.seconds)
    }
}
