//! `drop_mid_stream`: 200, the start of an answer carrying `chars`, then the
//! connection closes before the wire's terminal event (`[DONE]`,
//! `response.completed`, `message_stop`, the chunk with `finishReason`): the
//! chunked body is cut, not terminated. Not streaming: the start of the JSON
//! body, then the cut.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DropMidStream {
    #[serde(default = "default_chars")]
    pub chars: String,
}

fn default_chars() -> String {
    "Partial ans".into()
}

impl crate::kinds::Kind for DropMidStream {
    const NAME: &'static str = "drop_mid_stream";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts {
        explore: &[crate::kinds::Explored {
            key: "drop_mid_stream",
            short: "drop",
            fields: "{}",
            per_mille: 100,
            persist_per_mille: 150,
            rank: 2,
            mid_stream: true,
        }],
        ..crate::kinds::Facts::coloured("#795548")
    };
}

impl super::ReplyKind for DropMidStream {
    fn retryable(&self) -> bool {
        true
    }

    fn plan(&self, ctx: &super::ReplyCtx<'_>) -> super::Plan {
        use super::{render, Beat};
        use crate::provider::wire::Event;
        super::Plan::Beats(vec![
            Beat::Emit(Event::Start),
            Beat::Emit(Event::TextDelta(render(&self.chars, ctx.nonce, None))),
            // Let the chunks reach the socket before the cut.
            Beat::Flush,
            Beat::Cut,
        ])
    }
}

#[cfg(test)]
mod tests {
    use crate::provider::replies::ReplyKind;
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::{on_chat, test_ctx};

    #[tokio::test]
    async fn chars_then_cut_without_finish_or_done() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let d: DropMidStream = serde_yaml::from_str("{}").unwrap();
        let resp = on_chat(d.plan(&test_ctx(&tools)), true, &cancel).await;
        let (body, cut) = collect(resp.into_body()).await;
        let body = String::from_utf8(body).unwrap();
        assert!(cut);
        assert!(body.contains("Partial ans"));
        assert!(!body.contains("[DONE]") && !body.contains("finish_reason\":\""));
    }
}
