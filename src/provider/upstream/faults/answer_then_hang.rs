//! `answer_then_hang`: relay the whole real reply, then keep the body open
//! (no end of stream, no close) for `seconds` (an hour by default, or until
//! shutdown), then cut. The agent has its full answer but the call never
//! ends.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerThenHang {
    #[serde(
        default = "crate::provider::replies::fault_seconds",
        deserialize_with = "crate::units::seconds"
    )]
    pub seconds: f64,
}

impl crate::kinds::Kind for AnswerThenHang {
    const NAME: &'static str = "answer_then_hang";
}

impl super::RelayFault for AnswerThenHang {
    fn at_end(&self) -> super::Act {
        super::Act::HoldThenCut(
            crate::provider::replies::secs(self.seconds),
            "held_after_answer",
        )
    }
}
