//! `relay` (proxy mode only): forward the call to the profile's `upstream:`
//! server on the agent's wire and relay the real reply, chunk by chunk,
//! optionally with one fault applied to it (see
//! [`crate::provider::upstream::faults`]): `{kind: relay}` relays as is,
//! `{kind: relay, fault: {kind: stall_after_events, events: 3}}` stalls the
//! real stream after its third event. Without an upstream the provider
//! answers a `relay` rule with a 500 naming the missing `upstream:`.

use serde::{Deserialize, Serialize};

use crate::provider::upstream::faults::Fault;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Relay {
    /// The fault applied to the relayed reply; none relays it as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
}

impl crate::kinds::Kind for Relay {
    const NAME: &'static str = "relay";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts::coloured("#5e35b1");
}

impl super::ReplyKind for Relay {
    fn source(&self) -> super::Source<'_> {
        super::Source::Upstream {
            fault: self.fault.as_ref(),
        }
    }

    /// Played only when the provider has no upstream.
    fn plan(&self, _ctx: &super::ReplyCtx<'_>) -> super::Plan {
        super::Plan::Error(crate::provider::wire::ErrorInfo::new(
            500,
            "chaosrun: a `relay` reply needs an upstream (profile `upstream:` or --upstream URL)"
                .to_string(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_fault_and_rejects_unknown_ones() {
        let r: Relay = serde_yaml::from_str("{}").unwrap();
        assert!(r.fault.is_none());
        for f in [
            "{kind: delay_first_byte, seconds: 2}",
            "{kind: stall_after_events, events: 3}",
            "{kind: cut_before_terminal}",
            "{kind: error, status: 429, retry_after: 1}",
            "{kind: answer_then_hang}",
        ] {
            let r: Relay = serde_yaml::from_str(&format!("{{fault: {f}}}")).unwrap();
            assert!(r.fault.is_some(), "{f}");
        }
        let e = serde_yaml::from_str::<Relay>("{fault: {kind: nope}}").unwrap_err();
        assert!(e.to_string().contains("stall_after_events"), "{e}");
    }
}
