//! `cassette`: answer main calls from a recorded session (see
//! [`crate::provider::cassette`]), on whatever wire is served, paced as it was
//! recorded: `{kind: cassette, file: rec/row.jsonl}`. The entry is picked by
//! position and by the call's match key (the documented match rule in
//! [`crate::provider::cassette::player`]); a call no entry matches gets a
//! 500 naming it and makes the scenario an ERROR. `fault:` takes any relay
//! fault (`stall_after_events`, `cut_before_terminal`, `delay_first_byte`,
//! `answer_then_hang`, `error`) and applies it to the replayed answer. Rules
//! before this one answer their calls first (e.g. a 429 storm at call 2).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::provider::upstream::faults::Fault;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CassetteReply {
    /// The cassette (JSON lines), relative to chaosrun's working directory.
    pub file: PathBuf,
    /// A fault applied to the replayed answer; none replays it as recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
}

impl crate::kinds::Kind for CassetteReply {
    const NAME: &'static str = "cassette";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts::coloured("#455a64");
}

impl super::ReplyKind for CassetteReply {
    fn source(&self) -> super::Source<'_> {
        super::Source::Replayed {
            file: &self.file,
            fault: self.fault.as_ref(),
        }
    }

    /// Played only when the provider could not load the cassette (never in a
    /// run: loading is checked before the run starts).
    fn plan(&self, _ctx: &super::ReplyCtx<'_>) -> super::Plan {
        super::Plan::Error(crate::provider::wire::ErrorInfo::new(
            500,
            format!("chaosrun: cassette {} is not loaded", self.file.display()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_with_and_without_a_fault() {
        let r: CassetteReply = serde_yaml::from_str("{file: a.jsonl}").unwrap();
        assert!(r.fault.is_none());
        let r: CassetteReply =
            serde_yaml::from_str("{file: a.jsonl, fault: {kind: stall_after_events, events: 2}}")
                .unwrap();
        assert!(r.fault.is_some());
        assert!(serde_yaml::from_str::<CassetteReply>("{}").is_err());
    }
}
