//! `cut_for_length`: the real answer cut for length, as a model that hit
//! its output limit sends it: the first half of its text (by characters,
//! across its text events), its tool calls kept with the last one's
//! arguments cut in half mid-JSON, and the finish `length` (the wire's
//! max-tokens finish). A value fault: see the family's doc.

use serde::{Deserialize, Serialize};

use crate::provider::cassette::Recorded;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CutForLength {}

impl crate::kinds::Kind for CutForLength {
    const NAME: &'static str = "cut_for_length";
}

/// The first half of `s`, by characters.
fn half(s: &str) -> String {
    s.chars().take(s.chars().count() / 2).collect()
}

impl super::RelayFault for CutForLength {
    fn mutates(&self) -> bool {
        true
    }

    fn mutate(&self, events: &mut Vec<Recorded>) {
        let total: usize = events
            .iter()
            .map(|e| match e {
                Recorded::Text { text, .. } => text.chars().count(),
                _ => 0,
            })
            .sum();
        let mut left = total / 2;
        events.retain_mut(|e| match e {
            Recorded::Text { text, .. } => {
                let n = text.chars().count();
                if n > left {
                    *text = text.chars().take(left).collect();
                }
                left -= text.chars().count();
                !text.is_empty()
            }
            _ => true,
        });
        if let Some(Recorded::ToolCall { arguments, .. }) = events
            .iter_mut()
            .rev()
            .find(|e| matches!(e, Recorded::ToolCall { .. }))
        {
            *arguments = half(arguments);
        }
        super::set_finish(events, "length");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::upstream::faults::RelayFault;

    fn text(at: f64, t: &str) -> Recorded {
        Recorded::Text { at, text: t.into() }
    }

    #[test]
    fn half_the_text_and_the_last_calls_arguments_then_length() {
        let mut ev = vec![
            text(0.0, "abcd"),
            text(0.1, "efghij"),
            Recorded::ToolCall { at: 0.2, id: "c1".into(), name: "shell".into(), arguments: "{\"command\":\"ls -la\"}".into() },
            Recorded::Finish { at: 0.3, reason: "tool_calls".into(), input_tokens: 1, output_tokens: 2 },
        ];
        CutForLength {}.mutate(&mut ev);
        let texts: Vec<&str> = ev.iter().filter_map(|e| match e { Recorded::Text { text, .. } => Some(text.as_str()), _ => None }).collect();
        assert_eq!(texts, ["abcd", "e"]);
        assert!(matches!(&ev[2], Recorded::ToolCall { arguments, .. } if arguments == "{\"command\""));
        assert!(matches!(&ev[3], Recorded::Finish { reason, .. } if reason == "length"));
    }
}
