//! `refused_answer`: the real answer replaced by a refusal: its text and tool
//! calls gone, `text` (default "I can't help with that request.") in their
//! place, and the content-filter finish (`content_filter`: the wire's
//! refusal or safety finish). A value fault: see the family's doc.

use serde::{Deserialize, Serialize};

use crate::provider::cassette::Recorded;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefusedAnswer {
    #[serde(default = "default_text")]
    pub text: String,
}

fn default_text() -> String {
    "I can't help with that request.".into()
}

impl crate::kinds::Kind for RefusedAnswer {
    const NAME: &'static str = "refused_answer";
}

impl super::RelayFault for RefusedAnswer {
    fn mutates(&self) -> bool {
        true
    }

    fn mutate(&self, events: &mut Vec<Recorded>) {
        super::without_content(events);
        let at = events.first().map_or(0.0, Recorded::at);
        let first_non_reasoning = events
            .iter()
            .position(|e| !matches!(e, Recorded::Reasoning { .. }))
            .unwrap_or(events.len());
        events.insert(first_non_reasoning, Recorded::Text { at, text: self.text.clone() });
        super::set_finish(events, "content_filter");
    }
}
