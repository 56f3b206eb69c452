//! `text`: an answer. Planned as the start, the optional `reasoning` as
//! reasoning deltas, the text in `chunk_chars` pieces with `delay_per_chunk`
//! seconds between them, then the finish (`finish_reason`, usage), each
//! delta twice with `duplicate_frames`. Each wire encodes it (SSE when the
//! request streams, one JSON body otherwise).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Text {
    /// The answer; `{{nonce}}` and `{{call}}` (the main-call index, so each
    /// call's answer differs) are substituted.
    pub text: String,
    #[serde(
        default = "default_chunk_chars",
        deserialize_with = "crate::units::count_1"
    )]
    pub chunk_chars: usize,
    /// Seconds between content chunks.
    #[serde(default, deserialize_with = "crate::units::seconds")]
    pub delay_per_chunk: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(default = "default_finish")]
    pub finish_reason: String,
    /// Every content delta sent twice in a row (duplicated stream frames).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate_frames: bool,
}

fn default_chunk_chars() -> usize {
    16
}

fn default_finish() -> String {
    "stop".into()
}

impl Text {
    /// A plain answer with default streaming (probe and auxiliary replies).
    pub fn plain(text: impl Into<String>) -> Text {
        Text {
            text: text.into(),
            chunk_chars: default_chunk_chars(),
            delay_per_chunk: 0.0,
            reasoning: None,
            finish_reason: default_finish(),
            duplicate_frames: false,
        }
    }

    /// The answer to main call `call`: `{{nonce}}` and `{{call}}` substituted.
    fn rendered(&self, nonce: &str, call: u64) -> String {
        super::render(&self.text, nonce, None).replace("{{call}}", &call.to_string())
    }
}

impl crate::kinds::Kind for Text {
    const NAME: &'static str = "text";
    /// Explore serves four of its value faults: an empty 200, a tool-calls
    /// finish with no tool calls, an answer cut for length (each cut
    /// differs by its call, for `partial_sent_once`) and a refusal (the
    /// content-filter finish). An agent may end its turn on any of them.
    /// The last two of each pair split what the first had alone, right
    /// after it in the draw, so every other draw of a seed is as it was.
    const FACTS: crate::kinds::Facts = crate::kinds::Facts {
        explore: &[
            crate::kinds::Explored {
                key: "value_empty",
                short: "empty",
                fields: "{text: ''}",
                per_mille: 15,
                persist_per_mille: 50,
                rank: 5,
                mid_stream: false,
            },
            crate::kinds::Explored {
                key: "value_no_calls",
                short: "nocalls",
                fields: "{text: '', finish_reason: tool_calls}",
                per_mille: 15,
                persist_per_mille: 50,
                rank: 6,
                mid_stream: false,
            },
            crate::kinds::Explored {
                key: "value_cut",
                short: "cut",
                fields: "{text: 'a partial answer to call {{call}}, cut before its', finish_reason: length}",
                per_mille: 15,
                persist_per_mille: 50,
                rank: 7,
                mid_stream: false,
            },
            crate::kinds::Explored {
                key: "value_refused",
                short: "refused",
                fields: "{text: \"I can't help with that request.\", finish_reason: content_filter}",
                per_mille: 15,
                persist_per_mille: 50,
                rank: 8,
                mid_stream: false,
            },
        ],
        ..crate::kinds::Facts::coloured("#2e7d32")
    };
}

impl super::ReplyKind for Text {
    /// A paced answer is a fault; so is a value fault (an empty answer, or
    /// one that finishes other than `stop`: cut for length, refused, a
    /// tool-calls finish with no calls); an immediate whole answer is not.
    fn is_fault(&self) -> bool {
        self.delay_per_chunk > 0.0 || self.value_fault()
    }

    /// Empty, finished other than `stop`, or its frames duplicated.
    fn value_fault(&self) -> bool {
        self.text.is_empty() || self.finish_reason != "stop" || self.duplicate_frames
    }

    /// No text, and a finish that is not a cut.
    fn empty_answer(&self) -> bool {
        self.text.is_empty() && self.finish_reason != "length"
    }

    /// The answer as main call `call` got it, when cut for length.
    fn cut_text(&self, nonce: &str, call: u64) -> Option<String> {
        (self.finish_reason == "length").then(|| self.rendered(nonce, call))
    }

    fn plan(&self, ctx: &super::ReplyCtx<'_>) -> super::Plan {
        use super::{render, secs, Beat, Plan};
        use crate::provider::wire::{split_chars, Event, Usage};

        let text = self.rendered(ctx.nonce, ctx.main_index);
        let reasoning = self.reasoning.as_ref().map(|r| render(r, ctx.nonce, None));
        let answer_chars =
            text.chars().count() + reasoning.as_ref().map_or(0, |r| r.chars().count());
        let usage = Usage::estimate(ctx.request_bytes, answer_chars);

        let mut beats = vec![Beat::Emit(Event::Start)];
        if let Some(r) = &reasoning {
            for piece in split_chars(r, self.chunk_chars) {
                beats.push(Beat::Emit(Event::ReasoningDelta(piece.to_string())));
            }
        }
        let delay = secs(self.delay_per_chunk);
        for (n, piece) in split_chars(&text, self.chunk_chars).into_iter().enumerate() {
            if n > 0 && !delay.is_zero() {
                beats.push(Beat::Wait(delay));
            }
            beats.push(Beat::Emit(Event::TextDelta(piece.to_string())));
        }
        beats.push(Beat::Emit(Event::Finish {
            reason: self.finish_reason.clone(),
            usage,
        }));
        if self.duplicate_frames {
            beats = super::duplicated(beats);
        }
        Plan::Beats(beats)
    }
}

#[cfg(test)]
mod tests {
    use crate::provider::replies::ReplyKind;
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::{on_chat, test_ctx};

    #[tokio::test]
    async fn streams_reasoning_then_text_in_pieces_then_done() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let mut t = Text::plain("hello {{nonce}}");
        t.chunk_chars = 4;
        t.reasoning = Some("hmm".into());
        let resp = on_chat(t.plan(&test_ctx(&tools)), true, &cancel).await;
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let (body, cut) = collect(resp.into_body()).await;
        assert!(!cut);
        let body = String::from_utf8(body).unwrap();
        let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.last().unwrap(), &"data: [DONE]");
        assert!(events[1].contains("\"reasoning_content\":\"hmm\""));
        // "hello NONCE" is 11 chars in 4-char pieces: 3 content chunks.
        let content: Vec<&&str> = events
            .iter()
            .filter(|e| e.contains("\"content\":\""))
            .collect();
        assert_eq!(content.len(), 1 + 3, "role chunk + 3 pieces: {events:?}");
        assert!(events[events.len() - 2].contains("\"usage\""));
    }

    #[tokio::test]
    async fn non_streaming_is_one_completion() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let plan = Text::plain("hi {{nonce}}").plan(&test_ctx(&tools));
        let resp = on_chat(plan, false, &cancel).await;
        let (body, _) = collect(resp.into_body()).await;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["message"]["content"], "hi NONCE");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
    }
}
