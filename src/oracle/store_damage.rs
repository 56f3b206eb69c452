//! `store_resumed_past_damage`, for a row whose `store_damage` damaged the
//! agent's JSONL transcript before the restart (the way power loss and a
//! concurrent writer leave it): (a) every message the damage left intact
//! (the damaged transcript as chaosrun's reader sees it: malformed lines
//! skipped) is in the restarted agent's first request of the next turn (what
//! it resumed with; its user, assistant and tool messages: instructions are
//! rebuilt for each request) and still in the store at the end; (b) the restarted
//! agent answered that turn; (c) what it appended starts on a line of its
//! own, never continuing the damaged last line (its record fused onto the
//! torn tail is lost to every reader). Whether the agent said what it
//! dropped is not checked: no agent-independent place shows it. Not checked
//! when the damage could not be done (no transcript, too few records) or
//! its copy cannot be read; a request whose first messages the recording
//! left out is not evidence of a loss.

use super::history::messages_of;
use super::{clip, Check, Invariant};
use crate::message::Message;
use crate::observe::{Event, Observation};
use crate::provider::CallKind;
use crate::store::damaged::TailAfter;

const NAME: &str = "store_resumed_past_damage";

/// The check, for a row that damaged the store.
pub fn check(obs: &Observation) -> Option<Check> {
    let rec = obs.store_damage.as_ref()?;
    let inv = Invariant::StoreIntegrity;
    let kind = rec.kind.kind_name();
    let applied = match &rec.applied {
        Ok(a) => a,
        Err(why) => {
            return Some(Check::skipped(
                inv,
                NAME,
                format!("the damage `{kind}` could not be done: {why}"),
            ))
        }
    };
    let intact = match rec.after.as_ref().map(messages_of) {
        Some(Ok(m)) => m,
        Some(Err(why)) => {
            return Some(Check::skipped(
                inv,
                NAME,
                format!("the damaged transcript's copy: {why}"),
            ))
        }
        None => {
            return Some(Check::skipped(
                inv,
                NAME,
                "no copy of the damaged transcript was taken",
            ))
        }
    };
    let what = format!("{} ({})", applied.file, applied.did);
    let mut v = Vec::new();
    let answered = obs
        .turn_end(obs.probe_turn)
        .is_some_and(|(_, e)| e.completed);
    if !answered {
        v.push(format!(
            "the restarted agent did not answer the next turn after the damage to {what}"
        ));
    }
    match resumed_with(obs) {
        Some(r) if r.messages_dropped == 0 => v.extend(missing(
            &conversation(intact),
            &r.messages,
            &format!(
                "the restarted agent's first request of the next turn (#{})",
                r.seq
            ),
            &what,
        )),
        // The recording kept only the request's last messages.
        Some(_) => {}
        None if answered => v.push(format!(
            "no request of the next turn reached the provider after the damage to {what}"
        )),
        None => {}
    }
    if let Ok(kept) = messages_of(&obs.store) {
        v.extend(missing(intact, kept, "the store at the end", &what));
    }
    if let Some(TailAfter::Fused { appended }) = &rec.tail {
        v.push(format!(
            "the restarted agent's next append continued the damaged last line of {} instead of starting a line of its own (its record is lost to every reader): it appended {:?}",
            applied.file,
            clip(appended, 120)
        ));
    }
    Some(Check::new(inv, NAME, v))
}

/// The messages the row's `store_damage` destroyed: in the transcript
/// just before it, not among those it left intact (none when it was not
/// done or either copy cannot be read).
fn destroyed(obs: &Observation) -> Vec<&Message> {
    let Some(rec) = obs.store_damage.as_ref().filter(|r| r.applied.is_ok()) else {
        return vec![];
    };
    match (
        rec.before.as_ref().map(messages_of),
        rec.after.as_ref().map(messages_of),
    ) {
        (Some(Ok(before)), Some(Ok(after))) => before
            .iter()
            .filter(|m| !after.iter().any(|a| carried(m, a)))
            .collect(),
        _ => vec![],
    }
}

/// Whether the row's `store_damage` destroyed a message of the transcript
/// holding `text` in `role`.
fn took(obs: &Observation, role: &str, text: &str) -> bool {
    let text = text.trim();
    !text.is_empty()
        && destroyed(obs)
            .iter()
            .any(|m| m.role == role && m.content.contains(text))
}

/// Whether the row's `store_damage` destroyed the faulted turn's user
/// message (the probe's `probe_answered` then does not ask the resumed
/// request for it).
pub(super) fn took_fault_message(obs: &Observation) -> bool {
    took(obs, "user", &obs.fault_message)
}

/// Whether the row's `store_damage` destroyed the user message (the
/// faulted or the probe message) or the answer of the turn that ended with
/// `end` (`reload_keeps_done_turns` then does not ask the replay for it).
pub(super) fn took_turn(obs: &Observation, end: &crate::observe::TurnEnd) -> bool {
    let asked = if end.i == 0 {
        &obs.fault_message
    } else {
        &obs.probe_message
    };
    took(obs, "user", asked) || took(obs, "assistant", &end.final_text)
}

/// The restarted agent's first request of the next turn (the probe's):
/// the first probe request after the restart (the killed agent may have
/// sent one before it died).
fn resumed_with(obs: &Observation) -> Option<&crate::provider::RequestRecord> {
    let (restarted, ()) = obs.find(|e| matches!(e, Event::Restarted { .. }).then_some(()))?;
    obs.recording
        .requests
        .iter()
        .find(|r| r.kind == CallKind::Probe && r.at + obs.provider_offset >= restarted)
}

/// The conversation of `intact`: its user, assistant and tool messages (an
/// agent sends its system or developer instructions as it builds them for
/// each request, often outside the request's messages).
fn conversation(intact: &[Message]) -> Vec<Message> {
    intact
        .iter()
        .filter(|m| matches!(m.role.as_str(), "user" | "assistant" | "tool"))
        .cloned()
        .collect()
}

/// The messages of `intact` that `got` does not carry, named (each looked
/// for anywhere in it: a resume that dedupes a copy loses nothing).
fn missing(intact: &[Message], got: &[Message], place: &str, what: &str) -> Vec<String> {
    let gone: Vec<(usize, &Message)> = intact
        .iter()
        .enumerate()
        .filter(|(_, m)| !got.iter().any(|g| carried(m, g)))
        .collect();
    if gone.is_empty() {
        return vec![];
    }
    let named: Vec<String> = gone
        .iter()
        .take(3)
        .map(|(i, m)| format!("#{i} ({}, {:?})", m.role, clip(&m.content, 60)))
        .collect();
    vec![format!(
        "{} of the {} message(s) the damage to {what} left intact {} missing from {place}: {}{}",
        gone.len(),
        intact.len(),
        if gone.len() == 1 { "is" } else { "are" },
        named.join("; "),
        if gone.len() > 3 { "; …" } else { "" }
    )]
}

/// `got` carries the stored message `m`: the same role, its content (or
/// more around it: an agent may wrap a stored user message in context, a
/// date, when it sends it) and the same number of tool calls (ids are not
/// compared: a wire may rename them). A record
/// the damage repeated (`concurrent_append`) may read folded with its
/// original, as one message of the same content `k` times over: a resume
/// that keeps it once carries it.
fn carried(m: &Message, got: &Message) -> bool {
    let (want, have) = (m.content.trim(), got.content.trim());
    let times = if want == have || (!want.is_empty() && have.contains(want)) {
        1
    } else if !have.is_empty() && want.split('\n').all(|p| p.trim() == have) {
        want.split('\n').count()
    } else {
        return false;
    };
    m.role == got.role && m.tool_calls.len() == times * got.tool_calls.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::fixtures::{end, healthy, scenario, stored, NONCE};
    use crate::scenarios::damage::Damage;
    use crate::store::damaged::{Applied, DamageRecord};
    use crate::store::StoreObservation;

    fn obs(tail: TailAfter) -> Observation {
        let s = scenario("expect: error");
        let mut o = healthy(&s, end(0, true, false, "done"));
        let restart = Event::Restarted {
            pid: 43,
            start_turn: Some(1),
        };
        o.events.push(crate::observe::Timed {
            at: 0.5,
            worker: None,
            event: restart,
        });
        let intact = vec![
            stored("user", &o.fault_message, None, &[]),
            stored("assistant", "done", None, &[]),
        ];
        o.store_damage = Some(DamageRecord {
            kind: Damage::FuseRecords,
            applied: Ok(Applied {
                file: "s/a.jsonl".into(),
                did: "fused".into(),
                length: 10,
                ends_mid_line: false,
            }),
            before: Some(StoreObservation::Read {
                path: "before".into(),
                integrity: "ok".into(),
                messages: Ok(intact.clone()),
            }),
            after: Some(StoreObservation::Read {
                path: "copy".into(),
                integrity: "ok".into(),
                messages: Ok(intact),
            }),
            tail: Some(tail),
        });
        o
    }

    #[test]
    fn a_resume_that_keeps_every_intact_message_on_its_own_line_passes() {
        let c = check(&obs(TailAfter::OwnLine)).unwrap();
        assert!(!c.failed() && !c.not_checked(), "{:?}", c.violations());
        assert!(check(&healthy(
            &scenario("expect: error"),
            end(0, true, false, "d")
        ))
        .is_none());
    }

    #[test]
    fn a_resume_that_stopped_at_the_damage_is_named() {
        let mut o = obs(TailAfter::OwnLine);
        // The probe request lost the assistant's answer after the damage.
        o.recording.requests[1].messages.remove(1);
        let v = check(&o).unwrap().violations().to_vec();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("1 of the 2 message(s) the damage to s/a.jsonl (fused) left intact is missing from the restarted agent's first request")
                && v[0].contains("#1 (assistant, \"done\")"),
            "{v:?}"
        );
    }

    /// A probe request the killed agent sent before it died is not what
    /// the restarted agent resumed with.
    #[test]
    fn only_a_request_after_the_restart_counts() {
        let mut o = obs(TailAfter::OwnLine);
        for t in &mut o.events {
            if matches!(t.event, Event::Restarted { .. }) {
                t.at = 2.0;
            }
        }
        let v = check(&o).unwrap().violations().to_vec();
        assert!(
            v[0].contains("no request of the next turn reached the provider"),
            "{v:?}"
        );
    }

    #[test]
    fn a_repeated_record_folded_with_its_original_is_carried_once() {
        let twice = stored("assistant", "done\ndone", None, &[]);
        assert!(carried(&twice, &stored("assistant", "done", None, &[])));
        assert!(!carried(
            &twice,
            &stored("assistant", "done\nmore", None, &[])
        ));
        assert!(!carried(&twice, &stored("user", "done", None, &[])));
        let asked = stored("user", "run the job", None, &[]);
        let wrapped = stored("user", "<date>today</date>\n\nrun the job", None, &[]);
        assert!(carried(&asked, &wrapped) && !carried(&wrapped, &asked));
    }

    /// Instructions the agent rebuilds for each request are not looked for
    /// in it (the store at the end still must keep them).
    #[test]
    fn system_and_developer_messages_are_not_looked_for_in_the_request() {
        let mut o = obs(TailAfter::OwnLine);
        if let Some(StoreObservation::Read {
            messages: Ok(m), ..
        }) = o.store_damage.as_mut().and_then(|d| d.after.as_mut())
        {
            m.insert(0, stored("developer", "permissions", None, &[]));
        }
        let v = check(&o).unwrap().violations().to_vec();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("missing from the store at the end: #0 (developer"),
            "{v:?}"
        );
    }

    #[test]
    fn a_fault_message_the_damage_destroyed_is_told() {
        let mut o = obs(TailAfter::OwnLine);
        assert!(!took_fault_message(&o));
        if let Some(StoreObservation::Read {
            messages: Ok(m), ..
        }) = o.store_damage.as_mut().and_then(|d| d.after.as_mut())
        {
            m.remove(0);
        }
        assert!(took_fault_message(&o));
    }

    #[test]
    fn a_turn_the_damage_destroyed_is_told() {
        let mut o = obs(TailAfter::OwnLine);
        let done = end(0, true, false, "done");
        assert!(!took_turn(&o, &done));
        // An answer the store never held was not taken by the damage.
        assert!(!took_turn(
            &o,
            &end(0, true, false, "a warning, not stored")
        ));
        if let Some(StoreObservation::Read {
            messages: Ok(m), ..
        }) = o.store_damage.as_mut().and_then(|d| d.after.as_mut())
        {
            m.pop();
        }
        assert!(took_turn(&o, &done));
    }

    #[test]
    fn an_append_fused_onto_the_tail_and_an_unanswered_turn_fail() {
        let mut o = obs(TailAfter::Fused {
            appended: format!("{{\"role\":\"user\",\"content\":\"{NONCE}\"}}"),
        });
        o.events
            .retain(|t| !matches!(&t.event, Event::TurnEnd(e) if e.i == 1));
        let v = check(&o).unwrap().violations().to_vec();
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("did not answer the next turn"), "{v:?}");
        assert!(
            v[1].contains("continued the damaged last line of s/a.jsonl"),
            "{v:?}"
        );
    }

    #[test]
    fn damage_that_could_not_be_done_is_not_checked() {
        let mut o = obs(TailAfter::Untouched);
        if let Some(r) = &mut o.store_damage {
            r.applied = Err("the transcript holds 2 record(s)".into());
        }
        let why = check(&o).unwrap().not_checked_reason().unwrap().to_string();
        assert!(why.contains("`fuse_records` could not be done"), "{why}");
    }
}
