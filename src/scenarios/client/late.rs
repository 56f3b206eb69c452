//! `late`: serve the request as usual, but only after `delay` seconds (an
//! editor slow to show its permission prompt, a slow disk).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Late {
    /// Seconds before the answer.
    pub delay: f64,
}

impl crate::kinds::Kind for Late {
    const NAME: &'static str = "late";
}

impl super::ClientFault for Late {
    fn plan(&self) -> super::Plan {
        super::Plan::After(std::time::Duration::from_secs_f64(self.delay.clamp(0.0, 604_800.0)))
    }
}
