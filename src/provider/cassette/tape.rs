//! Recording one relayed main call as a cassette [`Entry`]: the relay feeds
//! the upstream's reply through (SSE events as its splitter cuts them, or the
//! chunks of a whole body, bounded), and when the upstream has sent all of it
//! the entry is finished: events decoded, nonce written as `{{nonce}}`. A
//! reply the relay stopped reading (a stall or cut fault, the agent gone) is
//! not recorded.

use super::decode::Decoder;
use super::{hide_nonce, Entry, MatchKey, Recorded};
use crate::message::Message;
use crate::provider::Wire;

/// The most bytes of a whole (non-streaming) body or error body kept.
const BODY_CAP: usize = 4 << 20;
/// The most characters of an upstream error message kept.
const ERROR_CAP: usize = 2048;

/// What the server knows of a main call when it goes upstream.
#[derive(Debug, Clone)]
pub(crate) struct TapeStart {
    pub main_index: u64,
    pub key: MatchKey,
    pub request: Vec<Message>,
    pub nonce: String,
}

/// One call being recorded.
pub(crate) struct Tape {
    start: TapeStart,
    status: u16,
    sse: bool,
    decoder: Decoder,
    body: Vec<u8>,
    truncated: bool,
    wire: Wire,
    /// The wire's finishing event has been seen.
    terminal: bool,
}

impl Tape {
    pub(crate) fn new(start: TapeStart, wire: Wire, status: u16, sse: bool) -> Tape {
        Tape {
            start,
            status,
            sse,
            decoder: Decoder::new(wire),
            body: Vec::new(),
            truncated: false,
            wire,
            terminal: false,
        }
    }

    /// Whether the answer is whole even if the upstream's end was not read
    /// (the agent may hang up right after the finishing event): its finishing
    /// event was seen, or its whole body is complete JSON.
    pub(crate) fn complete(&self) -> bool {
        if self.is_sse() {
            self.terminal
        } else {
            serde_json::from_slice::<serde::de::IgnoredAny>(&self.body).is_ok()
        }
    }

    /// Whether the reply is an event stream (fed one event at a time).
    pub(crate) fn is_sse(&self) -> bool {
        self.sse && self.status == 200
    }

    /// One SSE event.
    pub(crate) fn event(&mut self, raw: &[u8]) {
        self.terminal |= crate::provider::upstream::sse::is_terminal(self.wire, raw);
        self.decoder.sse_event(raw);
    }

    /// A chunk of a whole body (or of an error body).
    pub(crate) fn chunk(&mut self, bytes: &[u8]) {
        let room = BODY_CAP.saturating_sub(self.body.len());
        if bytes.len() > room {
            self.truncated = true;
        }
        self.body.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The entry, once the upstream has sent its whole reply.
    pub(crate) fn done(mut self) -> Entry {
        let nonce = self.start.nonce.clone();
        let (events, error) = if self.status == 200 {
            if !self.sse {
                self.decoder.whole(&self.body);
            }
            let (events, cut) = self.decoder.finish();
            self.truncated |= cut;
            (events, None)
        } else {
            let text = String::from_utf8_lossy(&self.body);
            // Redacted before it is cut: a secret across the cut is not
            // left half.
            let text: String = crate::redact::text(&text).chars().take(ERROR_CAP).collect();
            (Vec::new(), Some(hide_nonce(&text, &nonce)))
        };
        let events = events
            .into_iter()
            .map(|e| match e {
                Recorded::Text { at, text } => Recorded::Text {
                    at,
                    text: hide_nonce(&text, &nonce),
                },
                Recorded::Reasoning { at, text } => Recorded::Reasoning {
                    at,
                    text: hide_nonce(&text, &nonce),
                },
                Recorded::ToolCall {
                    at,
                    id,
                    name,
                    arguments,
                } => Recorded::ToolCall {
                    at,
                    id,
                    name,
                    arguments: hide_nonce(&arguments, &nonce),
                },
                f @ Recorded::Finish { .. } => f,
            })
            .collect();
        let mut request = self.start.request;
        for m in &mut request {
            m.content = hide_nonce(&m.content, &nonce);
        }
        Entry {
            call: self.start.main_index,
            key: self.start.key,
            status: self.status,
            events,
            error,
            truncated: self.truncated,
            request,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> TapeStart {
        TapeStart {
            main_index: 3,
            key: MatchKey {
                role: "user".into(),
                text: Some("say {{nonce}}".into()),
            },
            request: vec![],
            nonce: "N9".into(),
        }
    }

    #[test]
    fn a_stream_is_recorded_with_the_nonce_hidden() {
        let mut t = Tape::new(start(), Wire::OpenaiChat, 200, true);
        assert!(t.is_sse());
        t.event(b"data: {\"choices\":[{\"delta\":{\"content\":\"N9 ok\"}}]}\n\n");
        t.event(b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
        let e = t.done();
        assert_eq!(e.call, 3);
        assert!(matches!(&e.events[0], Recorded::Text { text, .. } if text == "{{nonce}} ok"));
        assert!(matches!(&e.events[1], Recorded::Finish { reason, .. } if reason == "stop"));
    }

    #[test]
    fn an_error_status_keeps_its_bounded_message() {
        let mut t = Tape::new(start(), Wire::Anthropic, 429, true);
        assert!(!t.is_sse());
        t.chunk(&vec![b'x'; ERROR_CAP * 2]);
        let e = t.done();
        assert_eq!(e.status, 429);
        assert_eq!(e.error.unwrap().len(), ERROR_CAP);
        assert!(e.events.is_empty());
    }
}
