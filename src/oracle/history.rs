//! History integrity: every assistant tool call has its own result right after
//! it, in every request sent to the model and in the agent's store; in a batch
//! each id carries its own output; huge outputs are bounded (≤ 1,000,000 chars
//! persisted, ≤ 2 MiB per request). Without a readable store, the store's
//! checks (the persisted size bound included) are not checked, never passed.
//!
//! Placeholder ids (`__fake_id__`, empty, missing: many SDKs persist them)
//! are not evidence of pairing: a store turn whose calls or results carry one
//! is paired by position only when that is unambiguous (one call, one
//! result); a turn with fewer results than calls fails whatever the ids; any
//! other such turn makes the pairing check `not checked`, naming the id.

use std::collections::BTreeSet;

use super::{clip, with_nonce, Check, Invariant};
use crate::message::Message;
use crate::observe::{is_placeholder_id, Observation, StoreObservation};
use crate::provider::CallKind;
use crate::scenarios::Scenario;

/// Largest request body allowed, in bytes.
pub const MAX_REQUEST_BYTES: usize = 2 * 1024 * 1024;
/// Longest persisted message content allowed, in characters.
pub const MAX_PERSISTED_CHARS: usize = 1_000_000;

/// Ids of assistant tool calls with no `tool` message in the block right after.
fn unanswered(msgs: &[Message]) -> Vec<&str> {
    let mut missing = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        if m.role != "assistant" || m.tool_calls.is_empty() {
            continue;
        }
        let answered: BTreeSet<&str> = msgs[i + 1..]
            .iter()
            .take_while(|f| f.role == "tool")
            .filter_map(|f| f.tool_call_id.as_deref())
            .collect();
        missing.extend(m.call_ids().into_iter().filter(|id| !answered.contains(id)));
    }
    missing
}

fn sent_requests(obs: &Observation) -> impl Iterator<Item = &crate::provider::RequestRecord> {
    obs.recording
        .requests
        .iter()
        .filter(|r| r.kind != CallKind::Aux)
}

fn wire_results(obs: &Observation) -> Check {
    let mut seen = BTreeSet::new();
    let mut v = Vec::new();
    for r in sent_requests(obs) {
        for id in unanswered(&r.messages) {
            if seen.insert(id.to_string()) {
                v.push(format!(
                    "request #{} sent tool call {id} without its result right after it",
                    r.seq
                ));
            }
        }
    }
    Check::new(Invariant::HistoryIntegrity, "wire_tool_results", v)
}

/// The store's messages, or why they cannot be checked.
fn stored(obs: &Observation) -> Result<&[Message], String> {
    messages_of(&obs.store)
}

/// A store read's messages, or why they cannot be checked.
pub(super) fn messages_of(store: &StoreObservation) -> Result<&[Message], String> {
    match store {
        StoreObservation::NotConfigured => Err("the adapter profile names no durable store".into()),
        StoreObservation::Missing { path } => Err(format!("the store {path} does not exist")),
        StoreObservation::Unreadable { error, .. } => {
            Err(format!("the store could not be opened: {error}"))
        }
        StoreObservation::NotRegular { path, why } => {
            Err(format!("the store {path} {why}; not read"))
        }
        StoreObservation::Read {
            messages: Err(e), ..
        } => Err(format!("the profile's messages query failed: {e}")),
        StoreObservation::Read {
            messages: Ok(m), ..
        } => Ok(m),
        StoreObservation::Postgres {
            messages: Err(e), ..
        } => Err(format!("the Postgres store could not be read: {e}")),
        StoreObservation::Postgres {
            messages: Ok(m), ..
        } => Ok(m),
        StoreObservation::Jsonl {
            messages: Err(e), ..
        } => Err(format!("the profile's JSONL mapping made no messages: {e}")),
        StoreObservation::Jsonl {
            messages: Ok(m), ..
        } => Ok(m),
    }
}

/// The store's pairing: (calls with no result, turns that cannot be paired
/// because of placeholder ids).
fn store_pairing(msgs: &[Message]) -> (Vec<String>, Vec<String>) {
    let (mut missing, mut ambiguous) = (Vec::new(), Vec::new());
    for (i, m) in msgs.iter().enumerate() {
        if m.role != "assistant" || m.tool_calls.is_empty() {
            continue;
        }
        let call_ids = m.call_ids();
        let block: Vec<&Message> = msgs[i + 1..]
            .iter()
            .take_while(|f| f.role == "tool")
            .collect();
        let result_ids: Vec<&str> = block
            .iter()
            .map(|f| f.tool_call_id.as_deref().unwrap_or(""))
            .collect();
        let placeholders: BTreeSet<&str> = call_ids
            .iter()
            .chain(result_ids.iter())
            .copied()
            .filter(|id| is_placeholder_id(id))
            .collect();
        if placeholders.is_empty() {
            let answered: BTreeSet<&str> = result_ids.into_iter().collect();
            missing.extend(
                call_ids
                    .iter()
                    .filter(|id| !answered.contains(*id))
                    .map(|id| id.to_string()),
            );
            continue;
        }
        let shown = placeholders
            .iter()
            .map(|p| format!("{p:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        if block.len() < call_ids.len() {
            missing.push(format!(
                "{} of message #{i}'s {} calls (only {} result(s) follow; ids {shown} are placeholders)",
                call_ids.len() - block.len(),
                call_ids.len(),
                block.len()
            ));
        } else if call_ids.len() == 1 && block.len() == 1 {
            // One call, one result right after it: paired by position.
        } else {
            ambiguous.push(format!(
                "message #{i} has {} calls and {} results with placeholder id(s) {shown}",
                call_ids.len(),
                block.len()
            ));
        }
    }
    (missing, ambiguous)
}

/// Whether chaosrun had to kill the agent (so a call may be legitimately in
/// flight in its store, and results it never got to send are not judged).
fn killed_mid_run(obs: &Observation) -> bool {
    matches!(
        obs.exited(),
        Some((
            _,
            crate::observe::Event::Exited {
                killed_by_chaosrun: true,
                ..
            }
        ))
    )
}

fn store_results(obs: &Observation) -> Check {
    let inv = Invariant::HistoryIntegrity;
    let msgs = match stored(obs) {
        Err(why) => return Check::skipped(inv, "store_tool_results", why),
        Ok(msgs) => msgs,
    };
    let (open, ambiguous) = store_pairing(msgs);
    if !open.is_empty() && killed_mid_run(obs) {
        return Check::skipped(
            inv,
            "store_tool_results",
            format!(
                "chaosrun killed the agent mid-run, so call(s) {} may have been in flight",
                open.join(", ")
            ),
        );
    }
    if let StoreObservation::Jsonl { read, .. } = &obs.store {
        if !open.is_empty() && read.partial() {
            return Check::skipped(
                inv,
                "store_tool_results",
                format!(
                    "not all of the transcript was read ({}), so call(s) {} may be answered in what was not",
                    read.caveats(),
                    open.join(", ")
                ),
            );
        }
    }
    if open.is_empty() && !ambiguous.is_empty() {
        return Check::skipped(
            inv,
            "store_tool_results",
            format!(
                "pairing by a placeholder id is not evidence: {}",
                ambiguous.join("; ")
            ),
        );
    }
    let v = open
        .into_iter()
        .map(|id| format!("the store holds tool call {id} with no result right after it"))
        .collect();
    Check::new(inv, "store_tool_results", v)
}

/// Whether a stored message is a turn: it has text, tool calls or answers
/// a call. An empty one (opencode writes an empty assistant message after
/// each user message) is no turn, whether the profile's mapping keeps it or
/// drops it.
fn is_turn(m: &Message) -> bool {
    m.content_chars > 0 || !m.tool_calls.is_empty() || m.tool_call_id.is_some()
}

/// No user turn persisted twice in a row (a resume that re-appends the turn
/// it was given); messages that are no turn ([`is_turn`]) do not separate
/// the two.
fn store_user_turns(obs: &Observation) -> Check {
    let inv = Invariant::HistoryIntegrity;
    let name = "store_no_duplicate_user_turn";
    let msgs = match stored(obs) {
        Err(why) => return Check::skipped(inv, name, why),
        Ok(msgs) => msgs,
    };
    let turns: Vec<(usize, &Message)> = msgs
        .iter()
        .enumerate()
        .filter(|(_, m)| is_turn(m))
        .collect();
    let v = turns
        .windows(2)
        .filter(|w| {
            let (a, b) = (w[0].1, w[1].1);
            a.role == "user"
                && b.role == "user"
                && a.content == b.content
                && a.content_chars == b.content_chars
        })
        .map(|w| {
            format!(
                "the store holds the user turn {:?} twice in a row (messages #{} and #{})",
                clip(&w[0].1.content, 80),
                w[0].0,
                w[1].0
            )
        })
        .collect();
    Check::new(inv, name, v)
}

/// The calls the provider issued whose result must carry a token of their
/// own: `echo TOKEN` shell calls, and `mcp_probe` calls (the MCP server's
/// probe tool answers `probe:TEXT`): (id, the call as the violation names
/// it, token).
fn echo_calls(obs: &Observation) -> Vec<(&str, String, String)> {
    obs.recording
        .issued_tool_calls
        .iter()
        .filter_map(|c| {
            let (verb, token) = match c.tool.as_str() {
                "mcp_probe" => (
                    "mcp_probe",
                    c.args.get(crate::mcp::jsonrpc::PROBE_ARG)?.as_str()?,
                ),
                _ => (
                    "echo",
                    c.args.get("command")?.as_str()?.strip_prefix("echo ")?,
                ),
            };
            let token = token.trim();
            Some((c.id.as_str(), format!("{verb} {token}"), token.to_string()))
        })
        .collect()
}

fn own_outputs(obs: &Observation) -> Check {
    let inv = Invariant::HistoryIntegrity;
    let calls = echo_calls(obs);
    if calls.is_empty() {
        return Check::skipped(
            inv,
            "own_outputs",
            "the provider issued no `echo TOKEN` or `mcp_probe` tool calls",
        );
    }
    let wire: Vec<&Message> = sent_requests(obs).flat_map(|r| &r.messages).collect();
    let ended = obs.turn_end(0).is_some();
    let mut v = Vec::new();
    for (id, label, token) in &calls {
        let results: Vec<&str> = wire
            .iter()
            .filter(|m| m.role == "tool" && m.tool_call_id.as_deref() == Some(id))
            .map(|m| m.content.as_str())
            .collect();
        if results.is_empty() {
            // A result is only due once the turn has returned.
            if ended {
                v.push(format!(
                    "tool call {id} ({label}) never had its result sent to the model"
                ));
            }
        } else if let Some(bad) = results.iter().find(|c| !c.contains(token.as_str())) {
            v.push(format!(
                "tool call {id} ({label}) carried another output: {:?}",
                clip(bad, 80)
            ));
        }
    }
    if let Ok(msgs) = stored(obs) {
        for (id, label, token) in &calls {
            let mine = msgs
                .iter()
                .find(|m| m.role == "tool" && m.tool_call_id.as_deref() == Some(id));
            match mine {
                Some(m) if !m.content.contains(token.as_str()) => v.push(format!(
                    "the store's result for {id} ({label}) is another output: {:?}",
                    clip(&m.content, 80)
                )),
                None if ended => v.push(format!(
                    "the store has no result for tool call {id} ({label})"
                )),
                _ => {}
            }
        }
    }
    Check::new(inv, "own_outputs", v)
}

fn result_contains(obs: &Observation, want: &str) -> Check {
    let want = with_nonce(want, obs);
    let found = sent_requests(obs)
        .flat_map(|r| &r.messages)
        .any(|m| m.role == "tool" && m.content.contains(&want));
    let inv = Invariant::HistoryIntegrity;
    if found {
        Check::new(inv, "tool_result_contains", vec![])
    } else if obs.turn_end(0).is_none() {
        Check::skipped(
            inv,
            "tool_result_contains",
            format!("the faulted turn never ended, so no result containing {want:?} was due yet"),
        )
    } else {
        Check::new(
            inv,
            "tool_result_contains",
            vec![format!(
                "no tool result sent to the model contains {want:?}"
            )],
        )
    }
}

/// Every request sent to the model stays within [`MAX_REQUEST_BYTES`].
fn size_bounds(obs: &Observation) -> Check {
    let v: Vec<String> = obs
        .recording
        .requests
        .iter()
        .filter(|r| r.size > MAX_REQUEST_BYTES)
        .map(|r| {
            format!(
                "request #{} was {} bytes; at most {MAX_REQUEST_BYTES} allowed (truncate or spill tool output)",
                r.seq, r.size
            )
        })
        .collect();
    Check::new(Invariant::HistoryIntegrity, "size_bounds", v)
}

/// Every persisted message stays within [`MAX_PERSISTED_CHARS`]; without a
/// readable store it is not checked (never passed).
fn persisted_size(obs: &Observation) -> Check {
    let inv = Invariant::HistoryIntegrity;
    let name = "persisted_size_bound";
    if matches!(obs.store, StoreObservation::NotConfigured) {
        return Check::skipped(inv, name, "no store declared in the adapter profile");
    }
    // A transcript line too long to parse is a persisted record past the
    // bound, whatever it holds: never a silent pass.
    let overlong: Vec<String> = match &obs.store {
        StoreObservation::Jsonl { read, .. } => read
            .overlong
            .iter()
            .map(|l| {
                format!("the store holds a record too long to read ({l}); at most {MAX_PERSISTED_CHARS} chars allowed")
            })
            .collect(),
        _ => Vec::new(),
    };
    match stored(obs) {
        Err(_) if !overlong.is_empty() => Check::new(inv, name, overlong),
        Err(why) => Check::skipped(inv, name, why),
        Ok(msgs) => Check::new(
            inv,
            name,
            msgs.iter()
                .filter(|m| m.content_chars > MAX_PERSISTED_CHARS)
                .map(|m| {
                    format!(
                        "the store holds a {} message of {} chars; at most {MAX_PERSISTED_CHARS} allowed",
                        m.role, m.content_chars
                    )
                })
                .chain(overlong)
                .collect(),
        ),
    }
}

/// Why the kept requests are not all the agent sent, if they are not: the
/// recording's caps dropped whole requests or a request's first messages.
fn requests_cut(obs: &Observation) -> Option<String> {
    let dropped = obs.recording.requests_dropped;
    let cut = obs
        .recording
        .requests
        .iter()
        .filter(|r| r.messages_dropped > 0)
        .count();
    (dropped > 0 || cut > 0).then(|| {
        format!(
            "the kept requests hold no unanswered tool call, but {dropped} request(s) were not kept and {cut} kept only their last messages (recording caps)"
        )
    })
}

pub fn check(s: &Scenario, obs: &Observation) -> Vec<Check> {
    let mut out = vec![
        super::unless_partial(wire_results(obs), requests_cut(obs)),
        store_results(obs),
        store_user_turns(obs),
    ];
    if s.check_echo_tokens {
        out.push(own_outputs(obs));
    }
    if let Some(want) = &s.tool_result_contains {
        out.push(result_contains(obs, want));
    }
    out.push(size_bounds(obs));
    out.push(persisted_size(obs));
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{self, *};
    use super::*;
    use crate::provider::recording::IssuedToolCall;

    fn named<'a>(c: &'a [Check], name: &str) -> &'a Check {
        c.iter().find(|c| c.name == name).unwrap()
    }

    fn with_wire(msgs: Vec<Message>) -> (Scenario, Observation) {
        let s = scenario("expect: ended\ncheck_echo_tokens: true");
        let mut o = healthy(&s, end(0, true, false, "done"));
        o.recording.requests.push(request(2, CallKind::Main, msgs));
        (s, o)
    }

    fn issue(o: &mut Observation, id: &str, cmd: &str) {
        o.recording.issued_tool_calls.push(IssuedToolCall {
            id: id.into(),
            tool: "shell".into(),
            args: serde_json::json!({ "command": cmd }),
            main_index: 0,
        });
    }

    #[test]
    fn answered_batch_passes_missing_result_fails() {
        let good = vec![
            msg("user", "u"),
            assistant_calls(&["a", "b"]),
            tool("a", "x"),
            tool("b", "y"),
        ];
        let (s, o) = with_wire(good);
        assert!(!named(&check(&s, &o), "wire_tool_results").failed());
        let bad = vec![
            msg("user", "u"),
            assistant_calls(&["a", "b"]),
            tool("a", "x"),
            msg("user", "next"),
        ];
        let (s, o) = with_wire(bad);
        let c = check(&s, &o);
        assert_eq!(named(&c, "wire_tool_results").violations().len(), 1);
        assert!(named(&c, "wire_tool_results").violations()[0].contains("tool call b"));
    }

    #[test]
    fn a_clean_pass_on_a_cut_recording_is_not_checked_but_a_violation_stands() {
        let good = vec![assistant_calls(&["a"]), tool("a", "x")];
        let (s, mut o) = with_wire(good);
        o.recording.requests_dropped = 3;
        let c = check(&s, &o);
        let reason = named(&c, "wire_tool_results").not_checked_reason().unwrap();
        assert!(reason.contains("3 request(s) were not kept"), "{reason}");
        let bad = vec![assistant_calls(&["a"]), msg("user", "next")];
        let (s, mut o) = with_wire(bad);
        o.recording.requests_dropped = 3;
        assert!(named(&check(&s, &o), "wire_tool_results").failed());
    }

    #[test]
    fn result_after_an_intervening_message_does_not_count() {
        let msgs = vec![assistant_calls(&["a"]), msg("user", "x"), tool("a", "late")];
        let (s, o) = with_wire(msgs);
        assert!(named(&check(&s, &o), "wire_tool_results").failed());
    }

    /// An `mcp_probe` call's result carries its text (`probe:TEXT`): a
    /// batch whose answers were handed out in arrival order fails.
    #[test]
    fn each_mcp_probe_call_must_carry_its_own_text() {
        let crossed = vec![
            assistant_calls(&["a", "b"]),
            tool("a", "probe:N-two"),
            tool("b", "probe:N-one"),
        ];
        let (s, mut o) = with_wire(crossed);
        for (id, text) in [("a", "N-one"), ("b", "N-two")] {
            o.recording.issued_tool_calls.push(IssuedToolCall {
                id: id.into(),
                tool: "mcp_probe".into(),
                args: serde_json::json!({ "text": text }),
                main_index: 0,
            });
        }
        o.store = StoreObservation::NotConfigured;
        let c = check(&s, &o);
        let own = named(&c, "own_outputs");
        assert_eq!(own.violations().len(), 2, "{own:?}");
        assert!(
            own.violations()[0].contains("tool call a (mcp_probe N-one) carried another output"),
            "{own:?}"
        );
        let mut o = o;
        let sent = &mut o.recording.requests.last_mut().unwrap().messages;
        sent[1] = tool("a", "probe:N-one");
        sent[2] = tool("b", "probe:N-two");
        assert!(!named(&check(&s, &o), "own_outputs").failed());
    }

    #[test]
    fn each_id_must_carry_its_own_token() {
        let msgs = vec![
            assistant_calls(&["a", "b"]),
            tool("a", "TOK0\n"),
            tool("b", "TOK0\n"),
        ];
        let (s, mut o) = with_wire(msgs);
        issue(&mut o, "a", "echo TOK0");
        issue(&mut o, "b", "echo TOK1");
        o.store = StoreObservation::NotConfigured;
        let c = check(&s, &o);
        let own = named(&c, "own_outputs");
        assert_eq!(own.violations().len(), 1, "{own:?}");
        assert!(own.violations()[0].contains("echo TOK1"));
    }

    #[test]
    fn own_outputs_not_checked_without_echo_calls() {
        let (s, o) = with_wire(vec![]);
        assert!(named(&check(&s, &o), "own_outputs").not_checked());
    }

    #[test]
    fn store_orphan_call_fails_and_missing_store_is_not_checked() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "done"));
        o.store = StoreObservation::Read {
            path: "p".into(),
            integrity: "ok".into(),
            messages: Ok(vec![
                fixtures::stored("assistant", "", None, &["c9"]),
                fixtures::stored("user", "u", None, &[]),
            ]),
        };
        assert!(named(&check(&s, &o), "store_tool_results").violations()[0].contains("c9"));
        o.store = StoreObservation::NotConfigured;
        assert!(named(&check(&s, &o), "store_tool_results").not_checked());
    }

    #[test]
    fn oversized_request_and_persisted_output_fail() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "done"));
        assert!(!named(&check(&s, &o), "size_bounds").failed());
        o.recording.requests[0].size = MAX_REQUEST_BYTES + 1;
        if let StoreObservation::Read {
            messages: Ok(m), ..
        } = &mut o.store
        {
            m[0].content_chars = 30_000_000;
        }
        let c = check(&s, &o);
        assert_eq!(named(&c, "size_bounds").violations().len(), 1);
        assert_eq!(named(&c, "persisted_size_bound").violations().len(), 1);
        o.store = StoreObservation::NotConfigured;
        let c = check(&s, &o);
        assert_eq!(
            named(&c, "persisted_size_bound").not_checked_reason(),
            Some("no store declared in the adapter profile")
        );
    }

    #[test]
    fn killed_agent_store_with_open_call_is_not_checked_but_wrong_outputs_still_fail() {
        let s = scenario("expect: ended\ncheck_echo_tokens: true\ntool_result_contains: x");
        let mut o = healthy(&s, end(0, true, false, "done"));
        o.events.retain(|t| {
            !matches!(
                t.event,
                crate::observe::Event::TurnEnd(_) | crate::observe::Event::Exited { .. }
            )
        });
        o.events.push(at(
            91.0,
            crate::observe::Event::Exited {
                code: None,
                signal: Some(9),
                killed_by_chaosrun: true,
            },
        ));
        o.store = StoreObservation::Read {
            path: "p".into(),
            integrity: "ok".into(),
            messages: Ok(vec![fixtures::stored("assistant", "", None, &["a"])]),
        };
        issue(&mut o, "a", "echo TOK0");
        let c = check(&s, &o);
        assert!(named(&c, "store_tool_results").not_checked());
        assert!(named(&c, "tool_result_contains").not_checked());
        assert!(
            !named(&c, "own_outputs").failed(),
            "a result never due is not a violation"
        );
        // A wrong output that was sent is a violation even in a killed run.
        o.recording.requests[0]
            .messages
            .extend([assistant_calls(&["a"]), tool("a", "TOK9")]);
        assert!(named(&check(&s, &o), "own_outputs").failed());
    }

    #[test]
    fn tool_result_contains_renders_the_nonce() {
        let s = scenario("expect: ended\ntool_result_contains: \"stdin-closed-{{nonce}}\"");
        let mut o = healthy(&s, end(0, true, false, "done"));
        assert!(named(&check(&s, &o), "tool_result_contains").failed());
        o.recording.requests[0]
            .messages
            .push(tool("a", &format!("stdin-closed-{NONCE}")));
        assert!(!named(&check(&s, &o), "tool_result_contains").failed());
    }

    fn with_store(msgs: Vec<Message>) -> (Scenario, Observation) {
        let (s, mut o) = with_wire(vec![]);
        o.store = StoreObservation::Read {
            path: "p".into(),
            integrity: "ok".into(),
            messages: Ok(msgs),
        };
        (s, o)
    }

    #[test]
    fn placeholder_ids_are_not_paired_unless_positions_are_unambiguous() {
        use fixtures::stored;
        // Two calls, two results, every id `__fake_id__`: not evidence.
        let (s, o) = with_store(vec![
            stored("assistant", "", None, &["__fake_id__", "__fake_id__"]),
            stored("tool", "a", Some("__fake_id__"), &[]),
            stored("tool", "b", Some("__fake_id__"), &[]),
        ]);
        let c = check(&s, &o);
        let why = named(&c, "store_tool_results")
            .not_checked_reason()
            .unwrap();
        assert!(
            why.contains("__fake_id__") && why.contains("message #0"),
            "{why}"
        );
        // One call, one result right after: paired by position.
        let (s, o) = with_store(vec![
            stored("assistant", "", None, &[""]),
            stored("tool", "a", Some(""), &[]),
        ]);
        let c = check(&s, &o);
        let st = named(&c, "store_tool_results");
        assert!(!st.failed() && !st.not_checked());
        // Two placeholder calls, one result: a call is unanswered whatever the ids.
        let (s, o) = with_store(vec![
            stored("assistant", "", None, &["__fake_id__", "__fake_id__"]),
            stored("tool", "a", Some("__fake_id__"), &[]),
            stored("user", "next", None, &[]),
        ]);
        let c = check(&s, &o);
        assert!(named(&c, "store_tool_results").violations()[0].contains("only 1 result"));
        // A real id still fails by id beside an ambiguous placeholder turn.
        let (s, o) = with_store(vec![
            stored("assistant", "", None, &["c1"]),
            stored("user", "u", None, &[]),
            stored("assistant", "", None, &["__fake_id__", "__fake_id__"]),
            stored("tool", "a", Some("__fake_id__"), &[]),
            stored("tool", "b", Some("__fake_id__"), &[]),
        ]);
        let c = check(&s, &o);
        assert!(named(&c, "store_tool_results").violations()[0].contains("c1"));
    }

    #[test]
    fn a_user_turn_persisted_twice_in_a_row_fails() {
        use fixtures::stored;
        let (s, o) = with_store(vec![
            stored("user", "run the job", None, &[]),
            stored("user", "run the job", None, &[]),
        ]);
        let c = check(&s, &o);
        assert!(named(&c, "store_no_duplicate_user_turn").violations()[0].contains("run the job"));
        let (s, o) = with_store(vec![
            stored("user", "run the job", None, &[]),
            stored("assistant", "ok", None, &[]),
            stored("user", "run the job", None, &[]),
        ]);
        assert!(!named(&check(&s, &o), "store_no_duplicate_user_turn").failed());
    }

    /// One opencode-like store (a message row, its parts) read through two
    /// mappings: one keeps a message with no text part (the empty assistant
    /// message written after each user message), one drops it.
    fn two_mappings(rows: &[(&str, Option<&str>, Option<&str>)]) -> [Vec<Check>; 2] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("store.db");
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(
            "CREATE TABLE message(id INTEGER PRIMARY KEY, role TEXT);
             CREATE TABLE part(id INTEGER PRIMARY KEY, message_id INTEGER, kind TEXT, text TEXT, call_id TEXT);",
        )
        .unwrap();
        for (i, (role, kind, text)) in rows.iter().enumerate() {
            conn.execute(
                "INSERT INTO message VALUES (?1, ?2)",
                rusqlite::params![i, role],
            )
            .unwrap();
            if let Some(kind) = kind {
                let call = (*kind != "text").then_some("call_1");
                conn.execute(
                    "INSERT INTO part(message_id, kind, text, call_id) VALUES (?1, ?2, ?3, ?4)",
                    rusqlite::params![i, kind, text, call],
                )
                .unwrap();
            }
        }
        drop(conn);
        let select =
            "SELECT CASE WHEN p.kind IS NULL OR p.kind = 'text' THEN m.role ELSE p.kind END,
                  p.text, p.call_id FROM message m";
        let keeps = format!("{select} LEFT JOIN part p ON p.message_id = m.id WHERE :session_id IS NOT NULL ORDER BY m.id");
        let drops = format!("{select} JOIN part p ON p.message_id = m.id WHERE :session_id IS NOT NULL ORDER BY m.id");
        [keeps, drops].map(|sql| {
            let spec: crate::store::StoreSpec = serde_yaml::from_str(&format!(
                "path: store.db\nshape: items\nmessages_sql: {sql:?}"
            ))
            .unwrap();
            let (s, mut o) = with_wire(vec![]);
            o.store = crate::store::observe(Some(&db), &spec, "s1");
            check(&s, &o)
        })
    }

    #[test]
    fn an_empty_message_between_two_user_turns_is_no_turn_whatever_the_mapping_keeps() {
        let verdict = |c: &[Check]| {
            named(c, "store_no_duplicate_user_turn")
                .violations()
                .to_vec()
        };
        // A turn stored again after a restart, an empty assistant message
        // between: a duplicate under both mappings.
        let [keeps, drops] = two_mappings(&[
            ("user", Some("text"), Some("run the job")),
            ("assistant", None, None),
            ("user", Some("text"), Some("run the job")),
            ("assistant", Some("text"), Some("done")),
        ]);
        let (k, d) = (verdict(&keeps), verdict(&drops));
        // The same verdict; the message numbers are each mapping's own.
        assert_eq!(k.len(), 1, "keeping the empty message: {k:?}");
        assert_eq!(d.len(), 1, "dropping the empty message: {d:?}");
        assert!(
            k[0].contains("\"run the job\" twice in a row (messages #0 and #2)"),
            "{k:?}"
        );
        assert!(
            d[0].contains("\"run the job\" twice in a row (messages #0 and #1)"),
            "{d:?}"
        );
        // Turns answered in between (text, or a call and its result): no
        // duplicate under either mapping.
        for between in [
            vec![("assistant", Some("text"), Some("done"))],
            vec![
                ("assistant", Some("tool_call"), Some("{}")),
                ("assistant", Some("tool_result"), Some("ok")),
            ],
        ] {
            let mut rows = vec![
                ("user", Some("text"), Some("run the job")),
                ("assistant", None, None),
            ];
            rows.extend(between);
            rows.push(("user", Some("text"), Some("run the job")));
            for c in two_mappings(&rows) {
                assert!(verdict(&c).is_empty(), "{:?}", verdict(&c));
            }
        }
    }

    #[test]
    fn a_capped_transcript_read_does_not_fail_an_open_call() {
        use fixtures::stored;
        let (s, mut o) = with_store(vec![]);
        let msgs = vec![
            stored("assistant", "", None, &["c1"]),
            stored("user", "u", None, &[]),
        ];
        o.store = StoreObservation::Jsonl {
            glob: "g".into(),
            read: crate::observe::TranscriptRead {
                unread_bytes: 10,
                ..Default::default()
            },
            messages: Ok(msgs.clone()),
        };
        let why = named(&check(&s, &o), "store_tool_results")
            .not_checked_reason()
            .unwrap()
            .to_string();
        assert!(why.contains("cap") && why.contains("c1"), "{why}");
        o.store = StoreObservation::Jsonl {
            glob: "g".into(),
            read: Default::default(),
            messages: Ok(msgs),
        };
        assert!(named(&check(&s, &o), "store_tool_results").failed());
    }

    #[test]
    fn a_transcript_line_too_long_to_read_fails_the_persisted_bound() {
        use fixtures::stored;
        let (s, mut o) = with_store(vec![]);
        let read = |overlong: Vec<String>| crate::observe::TranscriptRead {
            malformed: overlong.len(),
            overlong,
            ..Default::default()
        };
        o.store = StoreObservation::Jsonl {
            glob: "g".into(),
            read: read(vec!["t.jsonl:7: 33000000 bytes".into()]),
            messages: Ok(vec![stored("user", "u", None, &[])]),
        };
        let c = check(&s, &o);
        let v = named(&c, "persisted_size_bound").violations();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("t.jsonl:7: 33000000 bytes"), "{v:?}");
        o.store = StoreObservation::Jsonl {
            glob: "g".into(),
            read: read(vec![]),
            messages: Ok(vec![stored("user", "u", None, &[])]),
        };
        assert!(!named(&check(&s, &o), "persisted_size_bound").failed());
    }
}
