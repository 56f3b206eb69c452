//! `endpoint_fault`: what the provider does with every request the agent
//! makes on its host that is not a model call (a model list, an account or
//! auth endpoint, a probe for the kind of server it is: copilot-cli #3990,
//! codex #34397; Hermes asks five paths before it calls a model). `{kind:
//! hang}` never answers (the connection stays open until the scenario's
//! provider stops); `{kind: error, status: N}` answers N (400 to 599) with
//! the wire's error body. Model calls (the wire's generate paths) are
//! answered by the responder as always, so a healthy agent that does not
//! need the endpoint, or bounds its wait for it, boots and answers.
//!
//! Every faulted request is recorded as an auxiliary request whose reply
//! is [`RECORDED_HANG`] or [`RECORDED_ERROR`]: the oracle reads from them
//! whether the fault landed. Without the row's fault such requests are
//! answered as before (a model list on a wire that has one, else 404).

use serde::{Deserialize, Serialize};

/// The reply recorded for a request the fault left unanswered.
pub const RECORDED_HANG: &str = "endpoint_hang";

/// The reply recorded for a request the fault answered with an error.
pub const RECORDED_ERROR: &str = "endpoint_error";

/// A row's `endpoint_fault`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum EndpointFault {
    /// Never answered (a struct variant, so that a stray field is refused).
    Hang {},
    /// Answered with this status and the wire's error body.
    Error { status: u16 },
}

impl EndpointFault {
    /// Bounds the loader enforces: an error's status is 400 to 599.
    pub fn check(&self) -> Result<(), String> {
        match self {
            EndpointFault::Error { status } if !(400..=599).contains(status) => Err(format!(
                "`endpoint_fault` status {status}: it is an error status, 400 to 599"
            )),
            _ => Ok(()),
        }
    }

    /// Whether a recorded reply is this fault's.
    pub fn is_recorded(reply: &str) -> bool {
        reply == RECORDED_HANG || reply == RECORDED_ERROR
    }
}

impl std::fmt::Display for EndpointFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndpointFault::Hang {} => f.write_str("never answered"),
            EndpointFault::Error { status } => write!(f, "answered {status}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_a_status_is_an_error_status() {
        let hang: EndpointFault = serde_yaml::from_str("{kind: hang}").unwrap();
        assert_eq!(hang, EndpointFault::Hang {});
        let e: EndpointFault = serde_yaml::from_str("{kind: error, status: 503}").unwrap();
        assert_eq!(e, EndpointFault::Error { status: 503 });
        assert!(e.check().is_ok());
        let ok: EndpointFault = serde_yaml::from_str("{kind: error, status: 200}").unwrap();
        assert!(ok.check().unwrap_err().contains("400 to 599"));
        assert!(serde_yaml::from_str::<EndpointFault>("{kind: slow}").is_err());
        assert!(serde_yaml::from_str::<EndpointFault>("{kind: hang, status: 1}").is_err());
        assert!(EndpointFault::is_recorded(RECORDED_HANG));
        assert!(!EndpointFault::is_recorded("models"));
    }
}
