//! Replaying a cassette: which entry answers a main call, and the reply plan
//! it becomes on whatever wire is served.
//!
//! The match rule: each entry answers at most once. A call takes the next
//! unused entry (by position) when that entry's `match` key equals the call's
//! (its latest tool result's role and whitespace-collapsed text when it
//! follows one, whatever was appended after it, else its last message's; nonce as
//! `{{nonce}}`; an entry without `text` matches any text of that role, and
//! a `<redacted>` in it, a secret the recording replaced, any text there);
//! otherwise the first unused entry further on whose key equals it (a skipped
//! call); otherwise the last used entry whose key equals it (the agent sent
//! the same request again, e.g. a retry after a fault: it gets the same
//! recorded answer). No such entry is a miss: the call gets a 500 naming it
//! and the scenario is an ERROR (the cassette did not cover the
//! conversation). A row's rule placed before the cassette rule answers its
//! calls first, and those calls use no entry.

use std::sync::{Arc, Mutex};

use super::{Cassette, Entry, MatchKey, Recorded};
use crate::provider::replies::{secs, Beat, Plan};
use crate::provider::upstream::faults::{Act, RelayFault};
use crate::provider::wire::{ErrorInfo, Event, Usage};

/// How a replay's error starts, in the recording's `upstream_errors`.
const REPLAY_ERROR: &str = "cassette ";

/// Whether an `upstream_errors` entry is a replayed cassette's (no entry
/// for a call), not a live upstream's.
pub fn is_replay_error(e: &str) -> bool {
    e.starts_with(REPLAY_ERROR)
}

/// A cassette being replayed by one provider.
#[derive(Debug)]
pub struct Player {
    /// Where it was loaded from (for messages).
    pub file: String,
    /// Shared with every provider replaying the same file
    /// ([`super::shared`]).
    cassette: Arc<Cassette>,
    used: Mutex<Vec<bool>>,
}

fn matches(entry: &MatchKey, call: &MatchKey) -> bool {
    entry.role == call.role
        && entry
            .text
            .as_ref()
            .is_none_or(|t| call.text.as_deref().is_some_and(|c| fits(t, c)))
}

/// Whether `text` is `recorded` with each `<redacted>` in it standing for
/// any text (a secret the recording replaced, whatever its value now).
fn fits(recorded: &str, text: &str) -> bool {
    let mut pieces = recorded.split(crate::redact::MARK);
    let first = pieces.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let mut pieces: Vec<&str> = pieces.collect();
    let Some(last) = pieces.pop() else {
        return rest.is_empty();
    };
    for p in pieces {
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

impl Player {
    pub fn new(file: String, cassette: impl Into<Arc<Cassette>>) -> Player {
        let cassette = cassette.into();
        let used = Mutex::new(vec![false; cassette.entries.len()]);
        Player {
            file,
            cassette,
            used,
        }
    }

    /// The entry for a call whose match key is `key`, or why there is none.
    pub(crate) fn take(&self, main_index: u64, key: &MatchKey) -> Result<Entry, String> {
        let mut used = self.used.lock().unwrap();
        let next = used.iter().position(|u| !u);
        let fits = |i: &usize| matches(&self.cassette.entries[*i].key, key);
        let hit = next
            .filter(fits)
            .or_else(|| (0..used.len()).filter(|i| !used[*i]).find(fits))
            .or_else(|| (0..used.len()).filter(|i| used[*i]).rfind(fits));
        match hit {
            Some(i) => {
                used[i] = true;
                Ok(self.cassette.entries[i].clone())
            }
            None => {
                let text: String = key
                    .text
                    .as_deref()
                    .unwrap_or("")
                    .chars()
                    .take(120)
                    .collect();
                Err(format!(
                    "{REPLAY_ERROR}{}: no entry for main call {main_index} (matched on {}: {text:?}; \
                     {} of {} entries left)",
                    self.file,
                    key.role,
                    used.iter().filter(|u| !**u).count(),
                    used.len()
                ))
            }
        }
    }
}

/// The beats of one text-like event with the nonce put back.
fn emit(ev: &Recorded, nonce: &str, index: &mut usize, out: &mut Vec<Beat>) {
    let put = |s: &str| s.replace("{{nonce}}", nonce);
    match ev {
        Recorded::Text { text, .. } => out.push(Beat::Emit(Event::TextDelta(put(text)))),
        Recorded::Reasoning { text, .. } => out.push(Beat::Emit(Event::ReasoningDelta(put(text)))),
        Recorded::ToolCall {
            id,
            name,
            arguments,
            ..
        } => {
            let i = *index;
            *index += 1;
            out.push(Beat::Emit(Event::ToolCallStart {
                index: i,
                id: id.clone(),
                name: name.clone(),
            }));
            out.push(Beat::Emit(Event::ToolArgsDelta {
                index: i,
                text: put(arguments),
            }));
            out.push(Beat::Emit(Event::ToolCallEnd { index: i }));
        }
        Recorded::Finish {
            reason,
            input_tokens,
            output_tokens,
            ..
        } => out.push(Beat::Emit(Event::Finish {
            reason: reason.clone(),
            usage: Usage {
                prompt_tokens: *input_tokens,
                completion_tokens: *output_tokens,
            },
        })),
    }
}

/// `events` with `{{nonce}}` replaced in their text and arguments.
fn with_nonce(events: &[Recorded], nonce: &str) -> Vec<Recorded> {
    let put = |s: &mut String| *s = s.replace("{{nonce}}", nonce);
    let mut out = events.to_vec();
    for ev in &mut out {
        match ev {
            Recorded::Text { text, .. } | Recorded::Reasoning { text, .. } => put(text),
            Recorded::ToolCall { arguments, .. } => put(arguments),
            Recorded::Finish { .. } => {}
        }
    }
    out
}

/// The reply plan of `entry`, paced by its recorded offsets, with `fault`
/// (a relay fault) acting on it: a delay before the first event, a stall
/// after N events (the socket held silent, then cut), the finish left out and
/// the body cut, the whole answer and then no end, or the answer itself
/// changed (a value fault; its content frames sent twice when the fault
/// duplicates them).
pub(crate) fn plan(entry: &Entry, nonce: &str, fault: &dyn RelayFault) -> Plan {
    if entry.status != 200 {
        let message = entry
            .error
            .clone()
            .unwrap_or_else(|| format!("chaosrun: recorded upstream answer {}", entry.status));
        return Plan::Error(ErrorInfo::new(entry.status, message));
    }
    let mut beats = vec![
        Beat::Wait(fault.first_byte_delay()),
        Beat::Emit(Event::Start),
    ];
    let mutated;
    let events = if fault.mutates() {
        // The nonce put in first: a cut falls in the text the agent gets.
        let mut e = with_nonce(&entry.events, nonce);
        fault.mutate(&mut e);
        mutated = e;
        &mutated
    } else {
        &entry.events
    };
    let (mut at, mut index, mut emitted) = (0.0, 0usize, 1usize);
    for ev in events {
        if acted(
            fault.before(matches!(ev, Recorded::Finish { .. })),
            &mut beats,
        ) {
            return Plan::Beats(beats);
        }
        if ev.at() > at {
            beats.push(Beat::Wait(secs(ev.at() - at)));
            at = ev.at();
        }
        if acted(fault.after(emitted), &mut beats) {
            return Plan::Beats(beats);
        }
        emit(ev, nonce, &mut index, &mut beats);
        emitted += 1;
    }
    acted(fault.at_end(), &mut beats);
    if fault.duplicates_frames() {
        beats = crate::provider::replies::duplicated(beats);
    }
    Plan::Beats(beats)
}

/// The beats of what a fault did; true when it ended the answer.
fn acted(act: Act, beats: &mut Vec<Beat>) -> bool {
    match act {
        Act::Pass => return false,
        Act::Cut(_) => beats.extend([Beat::Flush, Beat::Cut]),
        Act::HoldThenCut(hold, _) => beats.extend([Beat::Flush, Beat::Wait(hold), Beat::Cut]),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::upstream::faults::{CutBeforeTerminal, NoFault, StallAfterEvents};
    use std::time::Duration;

    fn entry(role: &str, text: Option<&str>) -> Entry {
        Entry {
            call: 0,
            key: MatchKey {
                role: role.into(),
                text: text.map(String::from),
            },
            status: 200,
            events: vec![
                Recorded::Text {
                    at: 0.0,
                    text: "a {{nonce}}".into(),
                },
                Recorded::Text {
                    at: 0.5,
                    text: "b".into(),
                },
                Recorded::Finish {
                    at: 0.5,
                    reason: "stop".into(),
                    input_tokens: 1,
                    output_tokens: 1,
                },
            ],
            error: None,
            truncated: false,
            request: vec![],
        }
    }

    fn key(role: &str, text: &str) -> MatchKey {
        MatchKey {
            role: role.into(),
            text: Some(text.into()),
        }
    }

    fn player(entries: Vec<Entry>) -> Player {
        let header = super::super::Header {
            cassette: 1,
            wire: crate::provider::Wire::OpenaiChat,
            upstream: None,
            scenario: None,
        };
        Player::new("c.jsonl".into(), Cassette { header, entries })
    }

    #[test]
    fn position_then_content_then_miss() {
        let p = player(vec![
            entry("user", Some("go")),
            entry("tool", None),
            entry("tool", Some("done")),
        ]);
        assert_eq!(p.take(0, &key("user", "go")).unwrap().key.role, "user");
        // A retry of call 0 (same content) after it was used: the same entry.
        assert_eq!(
            p.take(1, &key("user", "go")).unwrap().key.text.as_deref(),
            Some("go")
        );
        // Entry 1 has no text: any tool result at this position.
        assert!(p
            .take(2, &key("tool", "whatever"))
            .unwrap()
            .key
            .text
            .is_none());
        let e = p.take(3, &key("user", "never recorded")).unwrap_err();
        assert!(
            e.contains("no entry for main call 3") && e.contains("1 of 3"),
            "{e}"
        );
        assert!(p.take(4, &key("tool", "done")).is_ok());
    }

    #[test]
    fn a_redacted_secret_matches_any_text_in_its_place() {
        for (recorded, text, fits) in [
            ("key <redacted> here", "key sk-123 here", true),
            ("key <redacted> here", "key sk-123 there", false),
            ("key <redacted>", "key anything at all", true),
            ("<redacted> and <redacted>", "a and b", true),
            ("<redacted> and <redacted>", "a or b", false),
            ("plain", "plain", true),
            ("plain", "plainer", false),
        ] {
            assert_eq!(super::fits(recorded, text), fits, "{recorded} ~ {text}");
        }
    }

    #[test]
    fn content_finds_a_later_entry() {
        let p = player(vec![entry("user", Some("a")), entry("user", Some("b"))]);
        assert!(p.take(0, &key("user", "b")).is_ok());
        assert!(p.take(1, &key("user", "a")).is_ok());
    }

    fn emits(plan: &Plan) -> usize {
        match plan {
            Plan::Beats(b) => b.iter().filter(|b| matches!(b, Beat::Emit(_))).count(),
            _ => 0,
        }
    }

    #[test]
    fn plans_pace_and_take_each_fault_shape() {
        let e = entry("user", None);
        let plan = super::plan(&e, "N1", &NoFault);
        let Plan::Beats(beats) = &plan else { panic!() };
        assert!(beats.contains(&Beat::Emit(Event::TextDelta("a N1".into()))));
        assert!(beats.contains(&Beat::Wait(Duration::from_millis(500))));
        assert_eq!(emits(&plan), 4);
        assert!(!beats.contains(&Beat::Cut));
        let stall = StallAfterEvents {
            events: 2,
            seconds: 9.0,
        };
        let plan = super::plan(&e, "N1", &stall);
        let Plan::Beats(beats) = &plan else { panic!() };
        assert_eq!(emits(&plan), 2);
        assert_eq!(
            &beats[beats.len() - 2..],
            &[Beat::Wait(Duration::from_secs(9)), Beat::Cut]
        );
        let plan = super::plan(&e, "N1", &CutBeforeTerminal {});
        assert_eq!(emits(&plan), 3);
        let mut err = entry("user", None);
        err.status = 429;
        assert!(matches!(super::plan(&err, "", &NoFault), Plan::Error(e) if e.status == 429));
    }

    /// A recorded session replayed with an answer changed: its text cut
    /// for length (the first half, then the `length` finish), emptied, or
    /// refused.
    #[test]
    fn value_faults_change_the_replayed_answer() {
        use crate::provider::upstream::faults::{
            CutForLength, DuplicateFrames, EmptyAnswer, RefusedAnswer,
        };
        let e = entry("user", None);
        let deltas = |plan: &Plan| -> (String, Vec<String>) {
            let Plan::Beats(beats) = plan else { panic!() };
            let mut text = String::new();
            let mut finish = Vec::new();
            for b in beats {
                match b {
                    Beat::Emit(Event::TextDelta(t)) => text.push_str(t),
                    Beat::Emit(Event::Finish { reason, .. }) => finish.push(reason.clone()),
                    _ => {}
                }
            }
            (text, finish)
        };
        // "a N1" + "b" (the nonce put in first) is 5 chars: 2 are kept.
        let (text, finish) = deltas(&super::plan(&e, "N1", &CutForLength {}));
        assert_eq!((text.as_str(), finish), ("a ", vec!["length".to_string()]));
        let (text, finish) = deltas(&super::plan(&e, "N1", &EmptyAnswer {}));
        assert_eq!((text.as_str(), finish), ("", vec!["stop".to_string()]));
        let refusal = RefusedAnswer { text: "no.".into() };
        let (text, finish) = deltas(&super::plan(&e, "N1", &refusal));
        assert_eq!(
            (text.as_str(), finish),
            ("no.", vec!["content_filter".to_string()])
        );
        // Each text frame twice.
        let (text, _) = deltas(&super::plan(&e, "N1", &DuplicateFrames {}));
        assert_eq!(text, "a N1a N1bb");
    }

    /// A replayed tool call with its arguments breaking the schema, and
    /// re-keyed to a stale id.
    #[test]
    fn a_replayed_tool_call_is_broken_or_re_keyed() {
        use crate::provider::upstream::faults::{BreakToolArgs, ReuseCallId};
        let mut e = entry("user", None);
        e.events = vec![Recorded::ToolCall {
            at: 0.0,
            id: "toolu_1".into(),
            name: "shell".into(),
            arguments: r#"{"command":"ls {{nonce}}"}"#.into(),
        }];
        let call = |plan: &Plan| -> (String, String) {
            let Plan::Beats(beats) = plan else { panic!() };
            let mut got = (String::new(), String::new());
            for b in beats {
                match b {
                    Beat::Emit(Event::ToolCallStart { id, .. }) => got.0 = id.clone(),
                    Beat::Emit(Event::ToolArgsDelta { text, .. }) => got.1.push_str(text),
                    _ => {}
                }
            }
            got
        };
        let wrong = BreakToolArgs::default();
        assert_eq!(
            call(&super::plan(&e, "N1", &wrong)),
            ("toolu_1".into(), r#"{"wrong_command":"ls N1"}"#.into())
        );
        let stale = ReuseCallId::default();
        assert_eq!(
            call(&super::plan(&e, "N1", &stale)),
            ("call_reused".into(), r#"{"command":"ls N1"}"#.into())
        );
    }
}
