//! `keepalive_forever`: 200 with the wire's stream headers, then the wire's
//! own keepalive every `interval` seconds, forever (until shutdown or the
//! client goes), and never one byte of content. A stream that only looks
//! alive: an agent whose stall timer is reset by any byte never cuts it.
//!
//! Per wire (streaming): OpenAI Chat sends SSE comment lines
//! (`: keepalive`); Anthropic sends `message_start` once, then `ping` events;
//! OpenAI Responses sends `response.created` once, then repeated
//! `response.in_progress` events; Gemini sends SSE comment lines. A
//! non-streaming request gets a 200 `application/json` body of one space per
//! interval (whitespace JSON allows before a value) and never the value.

use serde::{Deserialize, Serialize};

/// Shortest interval played, so a round always waits.
const MIN_INTERVAL: f64 = 0.01;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeepaliveForever {
    /// Seconds between keepalives (at least 0.01 is played).
    #[serde(
        default = "default_interval",
        deserialize_with = "crate::units::seconds"
    )]
    pub interval: f64,
}

fn default_interval() -> f64 {
    0.5
}

impl crate::kinds::Kind for KeepaliveForever {
    const NAME: &'static str = "keepalive_forever";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts {
        waits: true,
        ..crate::kinds::Facts::coloured("#0277bd")
    };
}

impl super::ReplyKind for KeepaliveForever {
    fn plan(&self, _ctx: &super::ReplyCtx<'_>) -> super::Plan {
        use super::{secs, Beat};
        use crate::provider::wire::Event;
        super::Plan::Beats(vec![Beat::Forever(vec![
            Beat::Emit(Event::Keepalive),
            Beat::Wait(secs(self.interval.max(MIN_INTERVAL))),
        ])])
    }
}

#[cfg(test)]
mod tests {
    use crate::provider::replies::ReplyKind;
    use super::*;
    use crate::provider::replies::on_wire;
    use crate::provider::wire::Wire;
    use futures_util::StreamExt;

    /// The first `n` body chunks as text, then the provider shuts down and
    /// the body is cut.
    async fn first_chunks(wire: Wire, stream: bool, n: usize) -> (String, bool) {
        let cancel = tokio_util::sync::CancellationToken::new();
        let k = KeepaliveForever { interval: 0.01 };
        let resp = on_wire(k.plan(&crate::provider::replies::test_ctx(&Default::default())), wire, stream, &cancel).await;
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body().into_data_stream();
        let mut text = String::new();
        for _ in 0..n {
            let chunk = body.next().await.unwrap().unwrap();
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        cancel.cancel();
        let cut = matches!(body.next().await, Some(Err(_)));
        (text, cut)
    }

    #[tokio::test]
    async fn each_wire_keeps_alive_in_its_own_way_and_sends_no_content() {
        for wire in [Wire::OpenaiChat, Wire::Gemini] {
            let (text, cut) = first_chunks(wire, true, 50).await;
            assert_eq!(text, ": keepalive\n\n".repeat(50), "{wire}");
            assert!(cut, "{wire}: shutdown cuts the endless body");
        }
        let (text, _) = first_chunks(Wire::Anthropic, true, 50).await;
        assert_eq!(text.matches("event: message_start").count(), 1);
        assert_eq!(text.matches("event: ping").count(), 50);
        assert!(!text.contains("content_block"), "{text}");
        let (text, _) = first_chunks(Wire::OpenaiResponses, true, 50).await;
        assert_eq!(text.matches("event: response.created").count(), 1);
        assert_eq!(text.matches("event: response.in_progress").count(), 50);
        assert!(!text.contains("output_text"), "{text}");
        // The sequence numbers keep counting: each round is encoded afresh.
        assert!(text.contains("\"sequence_number\":50"), "{text}");
    }

    #[tokio::test]
    async fn non_streaming_is_whitespace_forever() {
        let (text, cut) = first_chunks(Wire::OpenaiChat, false, 20).await;
        assert_eq!(text, " ".repeat(20));
        assert!(cut);
    }
}
