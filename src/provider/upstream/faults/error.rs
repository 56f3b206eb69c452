//! `error`: the upstream is called, its reply discarded, and this error
//! answered instead (the `error` reply kind's fields: `status`, `message`,
//! `retry_after`, `mid_stream`).

use serde::{Deserialize, Serialize};

use crate::provider::replies::ErrorReply;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ErrorFault(pub ErrorReply);

impl crate::kinds::Kind for ErrorFault {
    const NAME: &'static str = "error";
}

impl super::RelayFault for ErrorFault {
    fn replacement(&self) -> Option<&ErrorReply> {
        Some(&self.0)
    }
}
