//! What the provider remembers of each request: enough for the oracle (roles,
//! tool call ids, bounded contents, sizes, a hash of the body) and never a
//! whole 30 MB body; and how many requests it remembers ([`Recorder`]): the
//! first and the last ones of a scenario run, or the last ones for `serve`,
//! with the rest counted. A scenario run keeps their messages and headers on
//! disk until they are judged ([`super::spool`]) and brings them back within
//! the run-wide budget ([`super::ledger`]).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::ledger::Lease;
use super::spool::Spool;
use crate::message::Message;
pub use crate::message::CONTENT_KEEP_CHARS;

/// How many header bytes are kept per request.
pub const HEADERS_KEEP_BYTES: usize = 4 * 1024;

/// Which role a request played.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// Carries `tools`, not a probe: consumes the scenario's responder.
    Main,
    /// Latest user message carries `[[probe:NONCE]]`: answered `alive NONCE`.
    Probe,
    /// No `tools` (titles, summaries): a plain short answer.
    Aux,
    /// A user message of its opening (before any assistant or tool message)
    /// carries the row's `[[subagent:NONCE]]`: a
    /// subagent's call, counted apart; rules with `subagent: true` answer it
    /// (unmatched: `subagent done NONCE`).
    Subagent,
}

/// One request as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Order of arrival, from 0, over all requests of this provider.
    pub seq: u64,
    /// Seconds since the provider started.
    pub at: f64,
    pub kind: CallKind,
    /// For `Main`: index of this main call in the faulted turn, from 0; for
    /// `Subagent`, of this call among the subagent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main_index: Option<u64>,
    pub method: String,
    pub path: String,
    /// Header lines `name: value`, bounded to [`HEADERS_KEEP_BYTES`] in all.
    pub headers: Vec<String>,
    /// Body size in bytes as received.
    pub size: usize,
    /// SHA-256 of the whole body, hex (empty when there was no body).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub body_sha256: String,
    pub stream: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The tools the request offered the model, `name(arg,arg)` (see
    /// `wire::request::offered_tools`; bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Parsed messages (empty if the body was not JSON); the last
    /// [`RecordLimits::messages`] of them.
    pub messages: Vec<Message>,
    /// Messages of the request left out (its first ones) to stay in bounds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub messages_dropped: usize,
    /// True when any content or argument string was cut to its bound.
    pub truncated: bool,
    /// The reply kind served (`text`, `hang`, ..., `not_found`, `bad_request`).
    pub reply: String,
    /// For `Main`: which responder rule (index from 0) answered it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<usize>,
    /// Responses wire: the stored response this request continued (its
    /// conversation is prepended to `messages`), or named and was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_response_id: Option<String>,
    /// The error this request was answered with, and what it said about
    /// retrying (for the backoff check); absent for any other reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ReplyError>,
    /// A fingerprint of the credential the request carried (the first 12
    /// hex digits of its SHA-256; the key itself is never kept), on a row
    /// with a `credential:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// Seconds since the provider started when the answer was over: its
    /// last byte sent, or its connection closed under it (a client that
    /// gave up on a hung call), or, still open when the provider shut down,
    /// that moment. `None` only in a live snapshot of a call still being
    /// answered, or an observation older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<f64>,
}

/// What an error reply told the client about retrying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyError {
    /// The HTTP status (or the status of the error event, mid-stream).
    pub status: u16,
    /// Seconds the reply asked the client to wait (header or body, in the
    /// wire's own convention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// Whether the provider means it as "try again" (429, 408, 409, 5xx) and
    /// not as final (quota used up, context too long, any other 4xx).
    pub retryable: bool,
}

/// How a rule's `wait_for` ended for one main call: evidence that the
/// processes it waits for existed (or did not).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitOutcome {
    /// The responder rule (index from 0).
    pub rule: usize,
    pub main_index: u64,
    /// Enough matching processes were seen before the timeout.
    pub satisfied: bool,
    /// The most matching processes seen at once.
    pub seen: usize,
}

/// A tool call the provider issued (in logical terms, before tool mapping).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IssuedToolCall {
    pub id: String,
    /// Logical tool name as the scenario wrote it.
    pub tool: String,
    /// Logical arguments after templating (a JSON object, or a string for raw args).
    pub args: serde_json::Value,
    /// Main call index that issued it.
    pub main_index: u64,
}

/// Everything recorded by one provider.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    pub requests: Vec<RequestRecord>,
    pub issued_tool_calls: Vec<IssuedToolCall>,
    /// Each `wait_for` hold and how it ended (the first 256).
    #[serde(default)]
    pub waits: Vec<WaitOutcome>,
    /// Main calls each responder rule answered, by rule index (exact, kept
    /// even when requests are not).
    #[serde(default)]
    pub rule_hits: Vec<u64>,
    /// Exact counts (kept by atomics, so they hold even under a retry storm).
    pub main_calls: u64,
    pub probe_calls: u64,
    pub aux_calls: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub subagent_calls: u64,
    /// Answers that a sleep (`suspend`) silenced in flight: none means the
    /// sleep found nothing to cut.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub silenced: u64,
    /// Requests received but not kept in `requests` (past [`RecordLimits`]:
    /// the middle of a long run, or the oldest for `serve`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requests_dropped: u64,
    /// Proxy mode: each relayed call (the first 256; no header, no body).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relays: Vec<super::upstream::RelayRecord>,
    /// Proxy mode: why the upstream could not serve (the scenario is then
    /// an ERROR, not a verdict on the agent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_errors: Vec<String>,
    /// The room the requests hold in the run-wide budget, given back when
    /// they are dropped or slimmed ([`Recording::slim`]).
    #[serde(skip)]
    pub lease: Lease,
}

impl Recording {
    /// What a judged scenario's result keeps for the reports: each request's
    /// time, kind, reply and error, not its headers or messages (and the
    /// room they held in the run-wide budget is given back).
    pub fn slim(&mut self) {
        for r in &mut self.requests {
            r.headers = Vec::new();
            r.messages = Vec::new();
        }
        self.lease = Lease::default();
    }

    /// The kept requests of the agent's own turns (main calls), in order.
    pub fn main_requests(&self) -> impl Iterator<Item = &RequestRecord> {
        self.requests.iter().filter(|r| r.kind == CallKind::Main)
    }
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// SHA-256 of a body fed in chunks; hex, empty for an empty body.
#[derive(Default)]
pub struct BodyHash {
    hasher: sha2::Sha256,
    len: usize,
}

impl BodyHash {
    pub fn update(&mut self, chunk: &[u8]) {
        use sha2::Digest;
        self.hasher.update(chunk);
        self.len += chunk.len();
    }

    pub fn finish(self) -> String {
        use sha2::Digest;
        if self.len == 0 {
            return String::new();
        }
        self.hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// SHA-256 of a whole body, hex; empty for an empty body.
pub fn body_hash(body: &[u8]) -> String {
    let mut h = BodyHash::default();
    h.update(body);
    h.finish()
}

/// How much a provider remembers. Every message is first bounded to
/// [`CONTENT_KEEP_CHARS`]; then a request keeps its last `messages`
/// messages and at most `request_bytes` of content, and the recording keeps
/// at most `total_bytes` of content: past either, each message keeps
/// [`SHORT_KEEP_CHARS`] (ids, roles and full lengths are always kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLimits {
    /// The first requests kept.
    pub head: usize,
    /// The last requests kept (a ring).
    pub tail: usize,
    /// Messages kept per request (its last ones).
    pub messages: usize,
    /// Content bytes kept per request.
    pub request_bytes: usize,
    /// Content bytes kept over the whole recording.
    pub total_bytes: usize,
    /// Keep the requests' messages and headers on disk until they are
    /// taken ([`Recorder::take`]), not in memory.
    pub spool: bool,
}

/// Characters a message keeps once a request or the recording is past its
/// content budget: enough for short outputs such as `echo` tokens.
pub const SHORT_KEEP_CHARS: usize = 256;

impl RecordLimits {
    /// A scenario run: the first 500 and the last 500 requests, 1,000
    /// messages and 1 MiB of content per request, 32 MiB in all.
    pub const SCENARIO: RecordLimits = RecordLimits {
        head: 500,
        tail: 500,
        messages: 1000,
        request_bytes: 1 << 20,
        total_bytes: 32 << 20,
        spool: true,
    };

    /// `chaosrun serve`: a ring of the last 1,000 requests, 100 messages and
    /// 16 KiB of content per request.
    pub const SERVE: RecordLimits = RecordLimits {
        head: 0,
        tail: 1000,
        messages: 100,
        request_bytes: 16 << 10,
        total_bytes: 16 << 20,
        spool: false,
    };
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits::SCENARIO
    }
}

/// The requests a provider remembers, within its [`RecordLimits`].
#[derive(Debug, Default)]
pub struct Recorder {
    limits: RecordLimits,
    head: Vec<RequestRecord>,
    tail: VecDeque<RequestRecord>,
    /// The content bytes of each of `tail` (its messages may be spooled).
    tail_held: VecDeque<usize>,
    dropped: u64,
    /// Content bytes held now (in memory or spooled).
    held: usize,
    /// Where the kept requests' messages and headers are (with
    /// [`RecordLimits::spool`], once the first request came).
    spool: Option<Spool>,
}

/// What [`Recorder::take`] hands over: the requests, the spool holding their
/// messages and headers, how many were dropped.
#[derive(Debug)]
pub struct Taken {
    requests: Vec<RequestRecord>,
    spool: Option<Spool>,
    dropped: u64,
}

impl Taken {
    /// The requests whole, once there is room for them in the run-wide
    /// budget; how many were dropped; the room they hold.
    pub async fn whole(self) -> (Vec<RequestRecord>, u64, Lease) {
        let Taken {
            mut requests,
            spool,
            dropped,
        } = self;
        let Some(mut spool) = spool else {
            return (requests, dropped, Lease::default());
        };
        let lease = Lease::room(spool.len()).await;
        let back = tokio::task::spawn_blocking(move || {
            let read = spool.read_into(&mut requests);
            (requests, read)
        })
        .await;
        match back {
            Ok((requests, Ok(()))) => (requests, dropped, lease),
            Ok((mut requests, Err(_))) => {
                // The spool could not be read back: say the requests were cut.
                requests.iter_mut().for_each(|r| r.truncated = true);
                (requests, dropped, lease)
            }
            Err(_) => (Vec::new(), dropped, lease),
        }
    }
}

/// Content bytes a record holds.
fn content_bytes(r: &RequestRecord) -> usize {
    r.messages
        .iter()
        .map(|m| {
            m.content.len()
                + m.tool_calls
                    .iter()
                    .map(|c| c.arguments.len())
                    .sum::<usize>()
        })
        .sum()
}

/// Cut `s` to `chars` characters; whether it was cut.
fn cut(s: &mut String, chars: usize) -> bool {
    if s.len() <= chars {
        return false;
    }
    match s.char_indices().nth(chars) {
        Some((end, _)) => {
            // A fresh small allocation: shrinking in place would leave a hole
            // just too small for the next request's message of the same size,
            // and the heap would grow by a whole request each time.
            *s = s[..end].to_owned();
            true
        }
        None => false,
    }
}

impl Recorder {
    pub fn new(limits: RecordLimits) -> Recorder {
        Recorder {
            limits,
            ..Recorder::default()
        }
    }

    /// Bound `r` and keep it, forgetting the oldest of the tail if full.
    pub fn push(&mut self, mut r: RequestRecord) {
        let l = self.limits;
        if l.head + l.tail == 0 {
            self.dropped += 1;
            return;
        }
        if r.messages.len() > l.messages {
            let extra = r.messages.len() - l.messages;
            r.messages.drain(..extra);
            r.messages_dropped += extra;
            r.truncated = true;
        }
        let budget = l.request_bytes.min(l.total_bytes.saturating_sub(self.held));
        if content_bytes(&r) > budget {
            // Newest messages first: they carry the latest results.
            let mut used = 0;
            for m in r.messages.iter_mut().rev() {
                let room = budget.saturating_sub(used);
                if m.content.len() > room {
                    r.truncated |= cut(&mut m.content, SHORT_KEEP_CHARS);
                }
                for c in &mut m.tool_calls {
                    if c.arguments.len() > SHORT_KEEP_CHARS && used + c.arguments.len() > budget {
                        r.truncated |= cut(&mut c.arguments, SHORT_KEEP_CHARS);
                    }
                    used += c.arguments.len();
                }
                used += m.content.len();
            }
        }
        let bytes = content_bytes(&r);
        self.held += bytes;
        if l.spool && self.spool.is_none() {
            self.spool = Spool::new();
        }
        if let Some(s) = &mut self.spool {
            s.put(&mut r);
        }
        if self.head.len() < l.head {
            self.head.push(r);
            return;
        }
        if self.tail.len() == l.tail {
            if let Some(old) = self.tail.pop_front() {
                let old_bytes = self.tail_held.pop_front().unwrap_or_default();
                self.held -= old_bytes.min(self.held);
                if let Some(s) = &mut self.spool {
                    s.forget(old.seq);
                }
                self.dropped += 1;
            }
        }
        self.tail.push_back(r);
        self.tail_held.push_back(bytes);
    }

    /// The kept requests in arrival order (their spooled part read back),
    /// and how many were dropped.
    pub fn snapshot(&mut self) -> (Vec<RequestRecord>, u64) {
        let mut all: Vec<RequestRecord> = self.head.iter().chain(&self.tail).cloned().collect();
        all.sort_by_key(|r| r.seq);
        if let Some(s) = &mut self.spool {
            if s.read_into(&mut all).is_err() {
                all.iter_mut().for_each(|r| r.truncated = true);
            }
        }
        (all, self.dropped)
    }

    /// The answer to request `seq` is over at `at` (see
    /// [`RequestRecord::ended`]); nothing when it is not kept (or already
    /// over).
    pub fn end(&mut self, seq: u64, at: f64) {
        let kept = self.tail.iter_mut().rev().chain(self.head.iter_mut().rev());
        if let Some(r) = kept.into_iter().find(|r| r.seq == seq) {
            r.ended.get_or_insert(at);
        }
    }

    /// Every kept request still being answered ends at `at` (the provider
    /// shuts down).
    pub fn end_all(&mut self, at: f64) {
        for r in self.head.iter_mut().chain(self.tail.iter_mut()) {
            r.ended.get_or_insert(at);
        }
    }

    /// Where the kept requests' messages and headers are, once spooled.
    pub fn spool(&self) -> Option<&Spool> {
        self.spool.as_ref()
    }

    /// Everything kept, moved out (see [`Taken::whole`]); the recorder is
    /// left empty.
    pub fn take(&mut self) -> Taken {
        let mut requests: Vec<RequestRecord> = std::mem::take(&mut self.head);
        requests.extend(std::mem::take(&mut self.tail));
        requests.sort_by_key(|r| r.seq);
        self.tail_held.clear();
        self.held = 0;
        Taken {
            requests,
            spool: self.spool.take(),
            dropped: self.dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, messages: Vec<Message>) -> RequestRecord {
        RequestRecord {
            seq,
            at: 0.0,
            kind: CallKind::Main,
            main_index: Some(seq),
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            headers: vec![],
            size: 0,
            body_sha256: String::new(),
            stream: false,
            model: None,
            tools: vec![],
            messages,
            messages_dropped: 0,
            truncated: false,
            reply: "text".into(),
            rule: None,
            previous_response_id: None,
            error: None,
            credential: None,
            ended: None,
        }
    }

    fn msg(role: &str, content: &str) -> Message {
        Message::new(role, content)
    }

    #[test]
    fn an_answer_ends_once_and_shutdown_ends_the_open_ones() {
        let mut r = Recorder::new(RecordLimits {
            head: 1,
            tail: 2,
            ..RecordLimits::SCENARIO
        });
        for seq in 0..4 {
            r.push(record(seq, vec![msg("user", "hi")]));
        }
        r.end(0, 1.0);
        r.end(3, 2.0);
        r.end(3, 9.0);
        r.end(1, 3.0); // dropped: nothing to mark
        r.end_all(5.0);
        let (kept, _) = r.snapshot();
        let ended: Vec<_> = kept.iter().map(|r| (r.seq, r.ended)).collect();
        assert_eq!(ended, [(0, Some(1.0)), (2, Some(5.0)), (3, Some(2.0))]);
    }

    #[test]
    fn keeps_the_first_and_last_requests_and_counts_the_rest() {
        let mut r = Recorder::new(RecordLimits {
            head: 2,
            tail: 3,
            ..RecordLimits::SCENARIO
        });
        for seq in 0..10 {
            r.push(record(seq, vec![msg("user", "hi")]));
        }
        let (kept, dropped) = r.snapshot();
        let seqs: Vec<u64> = kept.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, vec![0, 1, 7, 8, 9]);
        assert_eq!(dropped, 5);
    }

    #[test]
    fn a_request_keeps_its_last_messages_within_its_budget() {
        let limits = RecordLimits {
            messages: 3,
            request_bytes: 1000,
            ..RecordLimits::SCENARIO
        };
        let mut r = Recorder::new(limits);
        let big = "x".repeat(900);
        let msgs = vec![
            msg("system", "s"),
            msg("user", "u"),
            msg("tool", &big),
            msg("tool", &big),
        ];
        r.push(record(0, msgs));
        let (kept, _) = r.snapshot();
        let m = &kept[0].messages;
        assert_eq!(kept[0].messages_dropped, 1);
        assert!(kept[0].truncated);
        assert_eq!(m.len(), 3);
        assert_eq!(m[2].content.len(), 900, "the newest result is kept whole");
        assert_eq!(m[1].content.len(), SHORT_KEEP_CHARS);
        assert_eq!(m[1].content_chars, 900, "the full length is kept");
    }

    #[test]
    fn the_whole_recording_stays_within_its_budget() {
        let limits = RecordLimits {
            total_bytes: 10_000,
            ..RecordLimits::SCENARIO
        };
        let mut r = Recorder::new(limits);
        let big = "y".repeat(8000);
        for seq in 0..50 {
            r.push(record(seq, vec![msg("tool", &big)]));
        }
        let (kept, dropped) = r.snapshot();
        assert_eq!((kept.len(), dropped), (50, 0));
        let held: usize = kept.iter().map(content_bytes).sum();
        assert!(held <= 10_000 + 50 * SHORT_KEEP_CHARS, "{held}");
        assert_eq!(kept[49].messages[0].content.len(), SHORT_KEEP_CHARS);
    }

    #[test]
    fn a_ring_forgets_the_oldest() {
        let mut r = Recorder::new(RecordLimits {
            tail: 2,
            ..RecordLimits::SERVE
        });
        for seq in 0..5 {
            r.push(record(seq, vec![msg("tool", &"z".repeat(100_000))]));
        }
        let (kept, dropped) = r.snapshot();
        assert_eq!(kept.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(dropped, 3);
        assert!(kept[1].messages[0].content.len() <= RecordLimits::SERVE.request_bytes);
    }

    /// Content bytes the recorder holds in memory.
    fn resident(r: &Recorder) -> usize {
        r.head.iter().chain(&r.tail).map(content_bytes).sum()
    }

    #[tokio::test]
    async fn a_scenario_keeps_request_messages_on_disk_and_gets_them_back_the_same() {
        // A small content budget, so that what the ring forgets is given
        // back to it: both recorders must cut the same messages.
        let limits = RecordLimits {
            head: 5,
            tail: 5,
            total_bytes: 2_500_000,
            ..RecordLimits::SCENARIO
        };
        let mut disk = Recorder::new(limits);
        let mut memory = Recorder::new(RecordLimits {
            spool: false,
            ..limits
        });
        for seq in 0..30 {
            // A real agent's request: a long system prompt, the whole
            // history again, a large last result.
            let mut msgs = vec![msg("system", &"s".repeat(20_000))];
            msgs.extend((0..seq).map(|i| msg("user", &format!("turn {i} ").repeat(500))));
            msgs.push(msg("tool", &seq.to_string().repeat(300_000)));
            let r = record(seq, msgs);
            disk.push(r.clone());
            memory.push(r);
        }
        assert!(resident(&memory) > 1_000_000, "{}", resident(&memory));
        assert_eq!(
            resident(&disk),
            0,
            "nothing of the messages stays in memory"
        );
        let (kept, dropped) = disk.snapshot();
        assert_eq!((kept.clone(), dropped), memory.snapshot());
        // What the ring forgot was given back to the content budget.
        assert_eq!(disk.held, kept.iter().map(content_bytes).sum::<usize>());
        let (taken, dropped, lease) = disk.take().whole().await;
        assert_eq!((taken, dropped), (kept, 20));
        assert!(
            lease.bytes() > 1_000_000,
            "it holds room in the run's budget"
        );
    }

    #[test]
    fn a_slimmed_recording_keeps_no_message() {
        let mut rec = Recording {
            requests: vec![record(0, vec![msg("user", "hi")])],
            ..Recording::default()
        };
        rec.requests[0].headers = vec!["host: x".into()];
        rec.slim();
        assert!(rec.requests[0].messages.is_empty() && rec.requests[0].headers.is_empty());
        assert_eq!(rec.requests[0].seq, 0, "the rest is kept for the reports");
    }

    #[test]
    fn hashes_bodies() {
        assert_eq!(body_hash(b""), "");
        assert_eq!(
            body_hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let mut h = BodyHash::default();
        h.update(b"a");
        h.update(b"bc");
        assert_eq!(h.finish(), body_hash(b"abc"));
    }
}
