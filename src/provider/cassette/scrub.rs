//! A cassette without the run's secrets (`--record`): every string it writes
//! (the header's upstream, the match text, the request's messages, the
//! answer's text, reasoning and tool calls, an error body) has each value the
//! run's redactor ([`crate::redact`]) knows replaced by `<redacted>`, in every
//! spelling it matches (raw, JSON-escaped, percent-decoded). A secret the
//! upstream streamed across several text or reasoning chunks is seen whole:
//! the chunks it crosses are joined into one, at the offset of the last,
//! before it is replaced. Replay matches a `<redacted>` in a match text
//! against any text (see [`super::player`]).

use serde::Serialize;
use serde_json::Value;

use super::{Entry, Recorded};
use crate::redact::Redactor;

/// `entry` with the chunks a secret crosses joined (see the module doc);
/// its strings are replaced when it is written ([`line`]).
pub(crate) fn entry(mut entry: Entry, r: &Redactor) -> Entry {
    entry.events = join_split(std::mem::take(&mut entry.events), r);
    entry
}

/// One cassette line: `item` as JSON with every string redacted.
pub(crate) fn line<T: Serialize>(item: &T, r: Option<&Redactor>) -> serde_json::Result<String> {
    let mut v = serde_json::to_value(item)?;
    if let Some(r) = r {
        redact_strings(&mut v, r);
    }
    serde_json::to_string(&v)
}

fn redact_strings(v: &mut Value, r: &Redactor) {
    match v {
        Value::String(s) => {
            if let std::borrow::Cow::Owned(t) = r.text(s) {
                *s = t;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| redact_strings(v, r)),
        Value::Object(o) => o.values_mut().for_each(|v| redact_strings(v, r)),
        _ => {}
    }
}

/// The text of a text or reasoning chunk, and whether it is reasoning.
fn chunk(ev: &Recorded) -> Option<(&str, bool)> {
    match ev {
        Recorded::Text { text, .. } => Some((text, false)),
        Recorded::Reasoning { text, .. } => Some((text, true)),
        _ => None,
    }
}

/// `events` with every group of consecutive chunks of one kind that a secret
/// crosses joined into one chunk.
fn join_split(events: Vec<Recorded>, r: &Redactor) -> Vec<Recorded> {
    // How far (index) each chunk must be joined to.
    let mut join_to: Vec<usize> = (0..events.len()).collect();
    let mut i = 0;
    while i < events.len() {
        let Some((_, kind)) = chunk(&events[i]) else {
            i += 1;
            continue;
        };
        let mut end = i;
        while events
            .get(end + 1)
            .and_then(chunk)
            .is_some_and(|(_, k)| k == kind)
        {
            end += 1;
        }
        let mut whole = String::new();
        let mut starts = Vec::new();
        for ev in &events[i..=end] {
            starts.push(whole.len());
            whole.push_str(chunk(ev).map_or("", |c| c.0));
        }
        let at = |off: usize| i + starts.partition_point(|&s| s <= off) - 1;
        for span in r.spans(&whole) {
            let (first, last) = (at(span.start), at(span.end - 1));
            join_to[first] = join_to[first].max(last);
        }
        i = end + 1;
    }
    let mut out = Vec::with_capacity(events.len());
    let mut events = events.into_iter().enumerate().peekable();
    while let Some((i, ev)) = events.next() {
        let mut end = join_to[i];
        let mut joined = ev;
        while events.peek().is_some_and(|(k, _)| *k <= end) {
            let (k, next) = events.next().expect("peeked");
            end = end.max(join_to[k]);
            joined = join(joined, next);
        }
        out.push(joined);
    }
    out
}

/// Two chunks of one kind as one, at the later one's offset.
fn join(a: Recorded, b: Recorded) -> Recorded {
    match (a, b) {
        (Recorded::Text { text: x, .. }, Recorded::Text { at, text: y }) => {
            Recorded::Text { at, text: x + &y }
        }
        (Recorded::Reasoning { text: x, .. }, Recorded::Reasoning { at, text: y }) => {
            Recorded::Reasoning { at, text: x + &y }
        }
        (a, _) => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(at: f64, t: &str) -> Recorded {
        Recorded::Text { at, text: t.into() }
    }

    #[test]
    fn a_secret_streamed_across_chunks_is_joined_then_redacted() {
        let (r, _) = Redactor::new(vec!["sk-split-secret".to_string()]);
        let events = vec![
            text(0.0, "a "),
            text(0.1, "key sk-sp"),
            text(0.2, "lit-se"),
            text(0.3, "cret and "),
            text(0.4, "more"),
            Recorded::Reasoning {
                at: 0.5,
                text: "sk-split-".into(),
            },
            Recorded::Reasoning {
                at: 0.6,
                text: "secret".into(),
            },
        ];
        let joined = join_split(events, &r);
        assert_eq!(
            joined,
            vec![
                text(0.0, "a "),
                text(0.3, "key sk-split-secret and "),
                text(0.4, "more"),
                Recorded::Reasoning {
                    at: 0.6,
                    text: "sk-split-secret".into()
                },
            ]
        );
        let line = line(&joined, Some(&r)).unwrap();
        assert!(!line.contains("sk-split-secret"), "{line}");
        assert!(line.contains("key <redacted> and "), "{line}");
    }

    #[test]
    fn every_string_of_an_entry_is_redacted_in_each_spelling() {
        let (r, _) = Redactor::new(vec!["pa\"ss-word".to_string()]);
        let e = Entry {
            call: 0,
            key: super::super::MatchKey {
                role: "user".into(),
                text: Some("use pa\"ss-word".into()),
            },
            status: 429,
            events: vec![],
            error: Some(r#"{"error":"bad key pa\"ss-word"}"#.into()),
            truncated: false,
            request: vec![crate::message::Message::new("user", "use pa\"ss-word")],
        };
        let line = line(&entry(e, &r), Some(&r)).unwrap();
        assert!(!line.contains("ss-word"), "{line}");
        assert_eq!(line.matches("<redacted>").count(), 3, "{line}");
        let back: Entry = serde_json::from_str(&line).unwrap();
        assert_eq!(back.key.text.as_deref(), Some("use <redacted>"));
    }
}
