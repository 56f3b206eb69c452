//! `endless_text`: 200, the start of an answer, then text deltas that never
//! end: `text` every `interval` seconds, forever (until shutdown or the client
//! goes). A model stuck repeating itself: the agent must end the turn by its
//! own output cap or timeout.
//!
//! Every wire streams it as its own text deltas (chat `delta.content`,
//! Responses `response.output_text.delta`, Anthropic `text_delta`, Gemini
//! `parts[].text`); a non-streaming request gets the start of the wire's
//! whole body, its text string left open and growing. chaosrun's memory stays
//! one round: each round is encoded as it is sent (the Responses encoder
//! keeps at most 1 MiB of the text for its closing events), and the
//! recording holds requests, never replies.

use serde::{Deserialize, Serialize};

/// Shortest interval played, so a round always waits.
const MIN_INTERVAL: f64 = 0.001;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndlessText {
    /// One delta; `{{nonce}}` is substituted.
    #[serde(default = "default_text")]
    pub text: String,
    /// Seconds between deltas (at least 0.001 is played).
    #[serde(
        default = "default_interval",
        deserialize_with = "crate::units::seconds"
    )]
    pub interval: f64,
}

fn default_text() -> String {
    "All work and no play makes Jack a dull boy. ".repeat(20)
}

fn default_interval() -> f64 {
    0.01
}

impl crate::kinds::Kind for EndlessText {
    const NAME: &'static str = "endless_text";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts::coloured("#558b2f");
}

impl super::ReplyKind for EndlessText {
    fn plan(&self, ctx: &super::ReplyCtx<'_>) -> super::Plan {
        use super::{render, secs, Beat};
        use crate::provider::wire::Event;
        let text = render(&self.text, ctx.nonce, None);
        super::Plan::Beats(vec![
            Beat::Emit(Event::Start),
            Beat::Forever(vec![
                Beat::Emit(Event::TextDelta(text)),
                Beat::Wait(secs(self.interval.max(MIN_INTERVAL))),
            ]),
        ])
    }
}

#[cfg(test)]
mod tests {
    use crate::provider::replies::ReplyKind;
    use super::*;
    use crate::provider::replies::{on_wire, test_ctx};
    use crate::provider::wire::Wire;
    use futures_util::StreamExt;

    fn reply(text: &str) -> EndlessText {
        EndlessText {
            text: text.into(),
            interval: 0.0,
        }
    }

    /// Read body chunks until `bytes` arrived; the text read.
    async fn read(wire: Wire, stream: bool, bytes: usize) -> String {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let plan = reply("loop {{nonce}} ").plan(&test_ctx(&tools));
        let resp = on_wire(plan, wire, stream, &cancel).await;
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body().into_data_stream();
        let mut text = String::new();
        while text.len() < bytes {
            let chunk = body.next().await.unwrap().unwrap();
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        cancel.cancel();
        text
    }

    #[tokio::test]
    async fn every_wire_streams_text_deltas_that_never_finish() {
        for (wire, delta, finish) in [
            (
                Wire::OpenaiChat,
                "\"content\":\"loop NONCE \"",
                "finish_reason\":\"stop",
            ),
            (
                Wire::OpenaiResponses,
                "response.output_text.delta",
                "response.completed",
            ),
            (Wire::Anthropic, "\"text_delta\"", "message_stop"),
            (Wire::Gemini, "\"text\":\"loop NONCE \"", "finishReason"),
        ] {
            let text = read(wire, true, 200_000).await;
            assert!(text.matches(delta).count() > 100, "{wire}");
            assert!(!text.contains(finish), "{wire}");
        }
    }

    #[tokio::test]
    async fn non_streaming_grows_an_open_string() {
        let text = read(Wire::Anthropic, false, 10_000).await;
        assert!(text.starts_with('{'), "{}", &text[..80]);
        assert!(text.contains("loop NONCE loop NONCE loop NONCE"));
        assert!(serde_json::from_str::<serde_json::Value>(&text).is_err());
    }
}
