//! Cassettes: a recorded session a person can read and edit, replayed without
//! a network on any wire.
//!
//! A cassette is a JSON-lines file. Line 1 is the header
//! (`{"cassette":1,"wire":"openai-chat","upstream":"https://…"}`); every other
//! line is one relayed main call, in order ([`Entry`]): the request in the one
//! message model, the `match` key replay uses (a message's role and text:
//! the latest tool result when the request follows one, whatever the agent
//! appended after it, else the last message), and the upstream's answer as
//! wire-neutral events ([`Recorded`]: text and reasoning chunks with their
//! offsets in seconds from the response head, tool calls with arguments, the
//! finish with usage) or the error status it answered. The scenario's nonce
//! is written as `{{nonce}}` and put back on replay. No HTTP header is kept (only
//! the one message model and the answer), every value the run knows to be
//! secret is written as `<redacted>` wherever it appears ([`scrub`]: the
//! upstream's key echoed in an answer or an error, a `--pass-env` value in a
//! prompt), and every text is bounded ([`TEXT_CAP`], [`EVENTS_CAP`]).
//!
//! Owns the format, loading (a malformed line is `FILE:LINE: what`), writing,
//! the match rule ([`Player`]) and turning an entry back into reply beats.
//! [`decode`] reads an upstream's reply into events, [`tape`] records relays.

pub mod decode;
pub mod player;
pub mod scrub;
pub mod shared;
pub mod tape;

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::message::Message;

pub use player::Player;

/// The format version written in the header.
pub const VERSION: u64 = 1;
/// The most characters of one recorded text (chunk, arguments, message).
pub const TEXT_CAP: usize = 64 * 1024;
/// The most events recorded for one answer (the rest are left out and the
/// entry is marked `truncated`).
pub const EVENTS_CAP: usize = 4096;

/// Line 1 of a cassette.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// [`VERSION`].
    pub cassette: u64,
    /// The wire it was recorded on (replay works on every wire).
    pub wire: super::Wire,
    /// The upstream it was recorded from, without credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// What was recorded (a scenario id), for a reader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
}

/// What a replayed call is matched on: the message [`key_of`] picks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchKey {
    /// `user` or `tool` (or whatever role the last message had).
    pub role: String,
    /// Its text, whitespace-collapsed, nonce as `{{nonce}}`; absent (delete it
    /// by hand) = match whatever text comes at this position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// One recorded main call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Its main-call index when it was recorded.
    pub call: u64,
    #[serde(rename = "match")]
    pub key: MatchKey,
    /// The upstream's status (200 for an answer).
    pub status: u16,
    /// The answer (status 200).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Recorded>,
    /// The error message (any other status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Some text or events were left out to stay in bounds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The request in the one message model (for a reader; replay matches on
    /// `match` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub request: Vec<Message>,
}

/// One wire-neutral event of a recorded answer; `at` is seconds from the
/// response head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Recorded {
    Text {
        #[serde(deserialize_with = "crate::units::seconds")]
        at: f64,
        text: String,
    },
    Reasoning {
        #[serde(deserialize_with = "crate::units::seconds")]
        at: f64,
        text: String,
    },
    ToolCall {
        #[serde(deserialize_with = "crate::units::seconds")]
        at: f64,
        id: String,
        name: String,
        /// The arguments, a JSON text.
        arguments: String,
    },
    Finish {
        #[serde(deserialize_with = "crate::units::seconds")]
        at: f64,
        /// In OpenAI Chat terms: `stop`, `tool_calls`, `length`.
        reason: String,
        #[serde(default)]
        input_tokens: u64,
        #[serde(default)]
        output_tokens: u64,
    },
}

impl Recorded {
    /// Seconds from the response head.
    pub fn at(&self) -> f64 {
        match self {
            Recorded::Text { at, .. }
            | Recorded::Reasoning { at, .. }
            | Recorded::ToolCall { at, .. }
            | Recorded::Finish { at, .. } => *at,
        }
    }
}

/// A loaded cassette.
#[derive(Debug, Clone, PartialEq)]
pub struct Cassette {
    pub header: Header,
    pub entries: Vec<Entry>,
}

/// `text` with `nonce` written as `{{nonce}}` (recording).
pub(crate) fn hide_nonce(text: &str, nonce: &str) -> String {
    if nonce.is_empty() {
        text.to_string()
    } else {
        text.replace(nonce, "{{nonce}}")
    }
}

/// The match key of a request of `messages`: its latest tool result when it
/// follows one ([`crate::message::latest_result`]; a note the agent appended
/// after the result is the same after every result and says nothing of the
/// call), else its last message.
pub(crate) fn key_of(messages: &[Message], nonce: &str) -> MatchKey {
    let at = crate::message::latest_result(messages);
    let Some(m) = at.map(|i| &messages[i]).or(messages.last()) else {
        return MatchKey::default();
    };
    let text: Vec<&str> = m.content.split_whitespace().collect();
    MatchKey {
        role: m.role.clone(),
        text: Some(hide_nonce(&text.join(" "), nonce)),
    }
}

/// Load and check a cassette; the error is `FILE:LINE: what`.
pub fn load(path: &Path) -> Result<Cassette, String> {
    let text = crate::input::read_input_text(path, crate::input::CASSETTE).map_err(String::from)?;
    parse(&text, &path.display().to_string())
}

/// [`load`] without each entry's `request` (replay never reads it), read a
/// line at a time: the file's text is never held whole.
pub fn load_for_replay(path: &Path) -> Result<Cassette, String> {
    use std::io::BufRead;
    let cap = crate::input::CASSETTE;
    let name = path.display().to_string();
    let (file, _) = crate::input::open_input(path, cap).map_err(String::from)?;
    let mut file = std::io::BufReader::new(file);
    let mut reading = Reading::new(&name, false);
    let (mut line, mut read, mut n) = (Vec::new(), 0u64, 0usize);
    loop {
        line.clear();
        let got = file
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("{name}: cannot read the cassette: {e}"))?;
        if got == 0 {
            break;
        }
        read += got as u64;
        if read > cap.bytes {
            return Err(crate::input::too_big(path, cap).into());
        }
        let text =
            std::str::from_utf8(&line).map_err(|_| format!("{name}:{}: not UTF-8 text", n + 1))?;
        reading.line(n, text)?;
        n += 1;
    }
    reading.finish()
}

/// Parse cassette text (see [`load`]).
pub fn parse(text: &str, name: &str) -> Result<Cassette, String> {
    let mut reading = Reading::new(name, true);
    for (n, line) in text.lines().enumerate() {
        reading.line(n, line)?;
    }
    reading.finish()
}

/// A cassette being parsed, a line at a time.
struct Reading<'a> {
    name: &'a str,
    /// Keep each entry's `request`.
    requests: bool,
    header: Option<Header>,
    entries: Vec<Entry>,
}

impl<'a> Reading<'a> {
    fn new(name: &'a str, requests: bool) -> Reading<'a> {
        Reading {
            name,
            requests,
            header: None,
            entries: Vec::new(),
        }
    }

    /// Line `n` (from 0).
    fn line(&mut self, n: usize, line: &str) -> Result<(), String> {
        let name = self.name;
        if line.trim().is_empty() {
            return Ok(());
        }
        if self.header.is_none() {
            let header: Header = serde_json::from_str(line)
                .map_err(|e| format!("{name}:{}: not a cassette header: {e}", n + 1))?;
            if header.cassette != VERSION {
                return Err(format!(
                    "{name}:{}: cassette version {} (this chaosrun reads {VERSION})",
                    n + 1,
                    header.cassette
                ));
            }
            self.header = Some(header);
            return Ok(());
        }
        let mut entry: Entry =
            serde_json::from_str(line).map_err(|e| format!("{name}:{}: {e}", n + 1))?;
        if !self.requests {
            entry.request = Vec::new();
        }
        self.entries.push(entry);
        Ok(())
    }

    fn finish(self) -> Result<Cassette, String> {
        let header = self.header.ok_or_else(|| {
            format!(
                "{}:1: empty: a cassette starts with its header line",
                self.name
            )
        })?;
        Ok(Cassette {
            header,
            entries: self.entries,
        })
    }
}

/// Write `cassette` to `path` (replacing it, see
/// [`crate::output::write_atomic`]), one JSON object per line, with the run's
/// secrets redacted ([`scrub`]).
pub fn save(path: &Path, cassette: &Cassette) -> std::io::Result<()> {
    let r = crate::redact::run();
    let mut out = scrub::line(&cassette.header, r)?;
    out.push('\n');
    for e in &cassette.entries {
        let line = match r {
            Some(r) => scrub::line(&scrub::entry(e.clone(), r), Some(r))?,
            None => scrub::line(e, None)?,
        };
        out.push_str(&line);
        out.push('\n');
    }
    crate::output::write_atomic(path, out.as_bytes())
}

/// The entries a provider recorded (see [`crate::provider::Provider::tape`]).
pub struct TapeHandle(pub(crate) std::sync::Arc<crate::provider::upstream::RelayLog>);

impl TapeHandle {
    /// The recorded entries, in main-call order.
    pub fn entries(&self) -> Vec<Entry> {
        let mut v = self.0.tape.lock().unwrap().clone();
        v.sort_by_key(|e| e.call);
        v
    }

    /// Write them as a cassette at `path`.
    pub fn save(
        &self,
        path: &Path,
        wire: super::Wire,
        upstream: &str,
        scenario: Option<&str>,
    ) -> Result<(), String> {
        let cassette = Cassette {
            header: Header {
                cassette: VERSION,
                wire,
                upstream: Some(strip_credentials(upstream)),
                scenario: scenario.map(String::from),
            },
            entries: self.entries(),
        };
        save(path, &cassette).map_err(|e| format!("cannot write cassette {}: {e}", path.display()))
    }
}

/// `url` without `user:password@`.
pub(crate) fn strip_credentials(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string().trim_end_matches('/').to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"cassette":1,"wire":"anthropic"}
{"call":0,"match":{"role":"user","text":"hi {{nonce}}"},"status":200,"events":[{"type":"text","at":0.1,"text":"he"},{"type":"tool_call","at":0.2,"id":"c1","name":"shell","arguments":"{}"},{"type":"finish","at":0.3,"reason":"tool_calls"}]}

{"call":1,"match":{"role":"tool"},"status":429,"error":"slow down"}
"#;

    #[test]
    fn parses_and_round_trips() {
        let c = parse(GOOD, "c.jsonl").unwrap();
        assert_eq!(c.header.wire, super::super::Wire::Anthropic);
        assert_eq!(c.entries.len(), 2);
        assert_eq!(c.entries[1].key.text, None);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        save(&p, &c).unwrap();
        assert_eq!(load(&p).unwrap(), c);
    }

    #[test]
    fn a_malformed_line_names_file_and_line() {
        let bad = GOOD.replace("\"status\":429", "\"status\":\"x\"");
        let e = parse(&bad, "c.jsonl").unwrap_err();
        assert!(e.starts_with("c.jsonl:4: "), "{e}");
        let e = parse("{\"cassette\":2,\"wire\":\"gemini\"}\n", "c.jsonl").unwrap_err();
        assert!(e.starts_with("c.jsonl:1: cassette version 2"), "{e}");
        let e = parse("", "c.jsonl").unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let neg = GOOD.replace("\"at\":0.1", "\"at\":-1");
        let e = parse(&neg, "c.jsonl").unwrap_err();
        assert!(e.starts_with("c.jsonl:2: "), "{e}");
    }

    #[test]
    fn keys_collapse_whitespace_and_hide_the_nonce() {
        let m = Message::new("tool", " out  N123\nend ");
        let k = key_of(std::slice::from_ref(&m), "N123");
        assert_eq!(k.text.as_deref(), Some("out {{nonce}} end"));
        assert_eq!(k.role, "tool");
        assert_eq!(key_of(&[], "N123"), MatchKey::default());
    }

    #[test]
    fn a_note_after_a_result_does_not_key_the_call() {
        let call =
            Message::assistant_calls(vec![crate::message::ToolCall::new("c1", "shell", "{}")]);
        let note = Message::new("user", "<system-reminder>note</system-reminder>");
        let convo = [
            Message::new("user", "go"),
            call,
            Message::tool_result("c1", "out 1"),
            note.clone(),
        ];
        let k = key_of(&convo, "");
        assert_eq!(
            (k.role.as_str(), k.text.as_deref()),
            ("tool", Some("out 1"))
        );
        let answered = [&convo[..], &[Message::new("assistant", "done"), note]].concat();
        let k = key_of(&answered, "");
        assert_eq!(k.role, "user", "after the answer the last message keys it");
    }

    #[test]
    fn url_credentials_are_stripped() {
        assert_eq!(
            strip_credentials("https://u:p@h.example/v1"),
            "https://h.example/v1"
        );
        assert_eq!(strip_credentials("http://h/v1"), "http://h/v1");
    }
}
