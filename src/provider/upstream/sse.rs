//! Server-sent-event boundaries in a relayed stream, found incrementally:
//! chunks go in as they arrive, complete events (each with its blank-line
//! terminator) come out, and only the unfinished tail is held, capped at
//! [`EVENT_CAP`] (a longer "event" is passed on as it is). Also which event
//! finishes the answer on each wire (for `cut_before_terminal`).

use bytes::{Bytes, BytesMut};

use crate::provider::Wire;

/// Most bytes of one unfinished event held while waiting for its end.
pub(crate) const EVENT_CAP: usize = 1 << 20;

/// Splits a byte stream into SSE events.
#[derive(Default)]
pub(crate) struct Splitter {
    pending: BytesMut,
    /// Bytes of `pending` already searched for a boundary.
    scanned: usize,
}

impl Splitter {
    /// Feed a chunk; returns the events it completed, in order.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<Bytes> {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::new();
        loop {
            match boundary(&self.pending, self.scanned.saturating_sub(3)) {
                Some(end) => {
                    out.push(self.pending.split_to(end).freeze());
                    self.scanned = 0;
                }
                None => {
                    self.scanned = self.pending.len();
                    if self.pending.len() > EVENT_CAP {
                        out.push(self.pending.split().freeze());
                        self.scanned = 0;
                    }
                    return out;
                }
            }
        }
    }

    /// What is left when the stream ends (an event without its blank line).
    pub(crate) fn finish(&mut self) -> Option<Bytes> {
        (!self.pending.is_empty()).then(|| self.pending.split().freeze())
    }
}

/// The end (exclusive) of the first event in `buf`, searching from `from`:
/// after `\n\n`, `\r\n\r\n` or `\r\r`.
fn boundary(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 1 < buf.len() {
        match (buf[i], buf[i + 1]) {
            (b'\n', b'\n') | (b'\r', b'\r') => return Some(i + 2),
            (b'\r', b'\n') if buf.get(i + 2..i + 4) == Some(b"\r\n") => return Some(i + 4),
            _ => {}
        }
        i += 1;
    }
    None
}

/// An event's `event:` name and its `data:` lines joined.
pub(crate) fn fields(event: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(event);
    let mut name = String::new();
    let mut data = String::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            name = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    (name, data)
}

/// Whether `event` is the one that finishes the answer on `wire`.
pub(crate) fn is_terminal(wire: Wire, event: &[u8]) -> bool {
    let (name, data) = fields(event);
    let json: serde_json::Value = serde_json::from_str(&data).unwrap_or_default();
    let kind = if name.is_empty() {
        json["type"].as_str().unwrap_or_default().to_string()
    } else {
        name
    };
    wire.format().is_terminal(&kind, &data, &json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_across_chunks_and_keeps_the_tail() {
        let mut s = Splitter::default();
        assert!(s.push(b"data: a\n").is_empty());
        let got = s.push(b"\ndata: b\r\n\r\ndata: c");
        assert_eq!(
            got,
            vec![Bytes::from("data: a\n\n"), Bytes::from("data: b\r\n\r\n")]
        );
        assert_eq!(s.finish(), Some(Bytes::from("data: c")));
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn an_overlong_event_is_passed_on() {
        let mut s = Splitter::default();
        let big = vec![b'x'; EVENT_CAP + 1];
        assert_eq!(s.push(&big).len(), 1);
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn terminal_events_per_wire() {
        let chat = Wire::OpenaiChat;
        assert!(is_terminal(chat, b"data: [DONE]\n\n"));
        assert!(is_terminal(
            chat,
            br#"data: {"choices":[{"finish_reason":"stop"}]}"#
        ));
        assert!(!is_terminal(
            chat,
            br#"data: {"choices":[{"finish_reason":null}]}"#
        ));
        let r = Wire::OpenaiResponses;
        assert!(is_terminal(r, b"event: response.completed\ndata: {}\n\n"));
        assert!(!is_terminal(
            r,
            b"event: response.output_text.delta\ndata: {}\n\n"
        ));
        let a = Wire::Anthropic;
        assert!(is_terminal(a, b"event: message_stop\ndata: {}\n\n"));
        assert!(!is_terminal(a, b"event: content_block_delta\ndata: {}\n\n"));
        let g = Wire::Gemini;
        assert!(is_terminal(
            g,
            br#"data: {"candidates":[{"finishReason":"STOP"}]}"#
        ));
        assert!(!is_terminal(g, br#"data: {"candidates":[{"content":{}}]}"#));
    }
}
