//! The Responses conversation store behind `previous_response_id`: the
//! last [`CONVERSATIONS_KEPT`] finished answers with the conversation that
//! led to each.
use crate::message::{Message, ToolCall};
use crate::provider::replies::Beat;
use crate::provider::wire::{request, Answer, Event};

use super::Shared;

/// How many Responses conversations are kept for `previous_response_id`.
const CONVERSATIONS_KEPT: usize = 16;

impl Shared {
    /// The conversation stored under a Responses id.
    pub(super) fn conversation(&self, id: &str) -> Option<Vec<Message>> {
        let kept = self.conversations.lock().unwrap();
        kept.iter().find(|(k, _)| k == id).map(|(_, m)| m.clone())
    }

    /// Keep `history` and the answer `beats` give under `id`, when the answer
    /// finishes (a cut or failed reply leaves nothing to continue).
    pub(super) fn remember(&self, id: &str, mut history: Vec<Message>, beats: &[Beat]) {
        let events: Vec<Event> = beats
            .iter()
            .filter_map(|b| match b {
                Beat::Emit(e) => Some(e.clone()),
                _ => None,
            })
            .collect();
        let answer = Answer::collect(&events);
        if answer.finish.is_none() || answer.error.is_some() {
            return;
        }
        let mut truncated = false;
        let (content, content_chars) = request::bound(answer.text, &mut truncated);
        let (reasoning, reasoning_chars) =
            request::bound(answer.reasoning.unwrap_or_default(), &mut truncated);
        history.push(Message {
            role: "assistant".into(),
            content,
            content_chars,
            reasoning,
            reasoning_chars,
            tool_call_id: None,
            tool_calls: answer
                .calls
                .into_iter()
                .map(|c| ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: request::bound(c.arguments, &mut truncated).0,
                })
                .collect(),
        });
        let mut kept = self.conversations.lock().unwrap();
        if kept.len() >= CONVERSATIONS_KEPT {
            kept.pop_front();
        }
        kept.push_back((id.to_string(), history));
    }
}
