//! What `session/load` replayed after a restart, kept bounded: per replayed
//! turn the start of its user message and of its answer (normalised:
//! whitespace collapsed), for the oracle to compare with the turns that
//! completed before the kill.

use serde_json::Value;

use crate::observe::{normalise_replayed as normalise, ReplayedTurn, REPLAY_KEEP_CHARS};

/// Replayed turns kept; more are counted, not kept.
pub const REPLAY_KEEP_TURNS: usize = 200;

/// The replay being received.
#[derive(Debug, Default)]
pub(super) struct Replay {
    pub turns: Vec<ReplayedTurn>,
    /// Replayed turns past [`REPLAY_KEEP_TURNS`].
    pub dropped: u64,
    /// Replayed tool calls (`tool_call` updates).
    pub tool_calls: u64,
    /// The last update was a user message chunk (the next one continues it).
    in_user: bool,
}

impl Replay {
    /// One replayed `session/update` of `kind`.
    pub fn update(&mut self, kind: &str, update: &Value) {
        let text = update.pointer("/content/text").and_then(Value::as_str);
        match kind {
            "user_message_chunk" => {
                if !self.in_user {
                    if self.turns.len() >= REPLAY_KEEP_TURNS {
                        self.dropped += 1;
                    } else {
                        self.turns.push(ReplayedTurn::default());
                    }
                }
                self.in_user = true;
                if self.dropped == 0 {
                    if let Some(t) = self.turns.last_mut() {
                        keep(&mut t.user, text.unwrap_or(""));
                    }
                }
            }
            "agent_message_chunk" => {
                self.in_user = false;
                if self.dropped == 0 {
                    if self.turns.is_empty() {
                        self.turns.push(ReplayedTurn::default());
                    }
                    if let Some(t) = self.turns.last_mut() {
                        keep(&mut t.answer, text.unwrap_or(""));
                    }
                }
            }
            "tool_call" => {
                self.in_user = false;
                self.tool_calls += 1;
            }
            _ => self.in_user = false,
        }
    }

    /// The turns kept, their texts normalised.
    pub fn finish(mut self) -> (Vec<ReplayedTurn>, u64, u64) {
        for t in &mut self.turns {
            t.user = normalise(&t.user);
            t.answer = normalise(&t.answer);
        }
        (self.turns, self.dropped, self.tool_calls)
    }
}

/// Append `chunk` to `to`, up to a few times [`REPLAY_KEEP_CHARS`] (the
/// whitespace a normalisation removes is room it may need).
fn keep(to: &mut String, chunk: &str) {
    let room = (REPLAY_KEEP_CHARS * 4).saturating_sub(to.chars().count());
    to.extend(chunk.chars().take(room));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunk(text: &str) -> Value {
        json!({"content": {"type": "text", "text": text}})
    }

    #[test]
    fn chunks_join_into_turns_and_are_normalised() {
        let mut r = Replay::default();
        r.update("user_message_chunk", &chunk("hello "));
        r.update("user_message_chunk", &chunk(" there"));
        r.update("agent_message_chunk", &chunk("an\n answer"));
        r.update("tool_call", &json!({}));
        r.update("agent_message_chunk", &chunk(" more"));
        r.update("user_message_chunk", &chunk("second"));
        let (turns, dropped, tools) = r.finish();
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0].user, "hello there");
        assert_eq!(turns[0].answer, "an answer more");
        assert_eq!(turns[1].user, "second");
        assert_eq!(turns[1].answer, "");
        assert_eq!((dropped, tools), (0, 1));
    }

    #[test]
    fn turns_past_the_bound_are_counted_not_kept() {
        let mut r = Replay::default();
        for i in 0..REPLAY_KEEP_TURNS + 3 {
            r.update("user_message_chunk", &chunk(&format!("u{i}")));
            r.update("agent_message_chunk", &chunk(&"x".repeat(5000)));
        }
        let (turns, dropped, _) = r.finish();
        assert_eq!(turns.len(), REPLAY_KEEP_TURNS);
        assert_eq!(dropped, 3);
        assert_eq!(turns[0].answer.chars().count(), REPLAY_KEEP_CHARS);
    }
}
