//! `store_kept_across_kill`, for a row whose kill is aimed at a store write
//! (`at: {store_write_after_calls: N}`): the store as the kill left it (the
//! copy chaosrun took before the restart) must open and pass its integrity
//! check, or for JSONL transcripts hold only JSON records (a store torn by
//! the kill is what the restarted agent reads); every message the store held
//! when the trigger armed (the copy taken then, before the write the kill is
//! aimed at) must still be in it as the kill left it (a store rewritten
//! without a transaction is short exactly at the kill; one left empty or
//! deleted lost them all); and every message it held as the kill left it
//! must still be in the store at the end, in order (a restarted agent that
//! rolls back, rewrites or drops what was durable loses completed work,
//! which no request to the model need show). Not checked when nothing was
//! persisted before the kill, when no copy could be taken, or when the final
//! store cannot be read (that is `integrity_check`'s); an observation saved
//! before the copy at arming was taken is judged on the two others.

use super::history::messages_of;
use super::{clip, Check, Invariant};
use crate::message::Message;
use crate::observe::Observation;
use crate::store::StoreObservation;

const NAME: &str = "store_kept_across_kill";

/// The check, for a row that copied its store at a kill.
pub fn check(obs: &Observation) -> Option<Check> {
    let at_kill = obs.store_at_kill.as_ref()?;
    let inv = Invariant::StoreIntegrity;
    let armed = match obs.store_at_arm.as_ref().map(reference) {
        None => None,
        Some(Ok(m)) => Some(m),
        Some(Err(why)) => return Some(Check::skipped(inv, NAME, why)),
    };
    let held = match at_kill {
        // A store that held messages when the trigger armed and is gone as
        // the kill left it lost them all.
        StoreObservation::Missing { .. } => match armed {
            Some(a) if !a.is_empty() => &[][..],
            _ => {
                return Some(Check::skipped(
                    inv,
                    NAME,
                    "the agent had persisted nothing when it was killed",
                ))
            }
        },
        StoreObservation::Unreadable { path, error } if path.is_empty() => {
            return Some(Check::skipped(inv, NAME, format!("no copy of the store was taken at the kill: {error}")))
        }
        StoreObservation::Read { integrity, .. } if integrity != "ok" => {
            return Some(Check::new(inv, NAME, vec![format!(
                "the kill left the store torn: integrity_check on the store as the restarted agent found it says {:?}",
                clip(integrity, 200)
            )]))
        }
        StoreObservation::Jsonl { read, .. } if read.malformed > 0 => {
            return Some(Check::new(inv, NAME, vec![format!(
                "the kill left the transcript torn: {} line(s) of it as the restarted agent found it are not JSON records: {}",
                read.malformed,
                read.malformed_examples.join("; ")
            )]))
        }
        other => match messages_of(other) {
            Ok(m) => m,
            Err(why) => {
                return Some(Check::new(inv, NAME, vec![format!(
                    "the kill left a store that cannot be read back: {why}"
                )]))
            }
        },
    };
    let mut v = armed.map_or_else(Vec::new, |a| {
        lost(
            a,
            held,
            "when the kill's trigger armed",
            "as the kill left it",
        )
    });
    match messages_of(&obs.store) {
        Ok(kept) => v.extend(lost(
            held,
            kept,
            "when the agent was killed",
            "after the restart",
        )),
        Err(why) if v.is_empty() => {
            return Some(Check::skipped(inv, NAME, format!("the final store: {why}")))
        }
        Err(_) => {}
    }
    Some(Check::new(inv, NAME, v))
}

/// The messages of the copy taken when the trigger armed (none when there
/// was no store yet), or why they cannot be the reference (a copy taken
/// while the agent ran that does not read clean is chaosrun's, not a loss).
fn reference(at_arm: &StoreObservation) -> Result<&[Message], String> {
    let why = match at_arm {
        StoreObservation::Missing { .. } => return Ok(&[]),
        StoreObservation::Read { integrity, .. } if integrity != "ok" => {
            format!("integrity_check says {:?}", clip(integrity, 200))
        }
        StoreObservation::Jsonl { read, .. } if read.malformed > 0 => {
            format!("{} line(s) are not JSON records", read.malformed)
        }
        other => match messages_of(other) {
            Ok(m) => return Ok(m),
            Err(why) => why,
        },
    };
    Err(format!(
        "the copy of the store taken when the kill's trigger armed cannot be the reference: {why}"
    ))
}

/// The messages of `held` (the store `then`) that `kept` (the store `now`)
/// no longer has, in order (each matched at most once, after the previous
/// match), named.
fn lost(held: &[Message], kept: &[Message], then: &str, now: &str) -> Vec<String> {
    let mut rest = kept.iter();
    let gone: Vec<(usize, &Message)> = held
        .iter()
        .enumerate()
        .filter(|(_, m)| !rest.any(|k| same(m, k)))
        .collect();
    if gone.is_empty() {
        return vec![];
    }
    let named: Vec<String> = gone.iter().take(3).map(|(i, m)| describe(*i, m)).collect();
    let more = gone.len().saturating_sub(3);
    vec![format!(
        "{} of the {} message(s) the store held {then} {} gone {now}: {}{}",
        gone.len(),
        held.len(),
        if gone.len() == 1 { "is" } else { "are" },
        named.join("; "),
        if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        }
    )]
}

/// The same stored message: role, content, the result's call id and the
/// calls' ids.
fn same(a: &Message, b: &Message) -> bool {
    a.role == b.role
        && a.content == b.content
        && a.content_chars == b.content_chars
        && a.tool_call_id == b.tool_call_id
        && a.call_ids() == b.call_ids()
}

fn describe(i: usize, m: &Message) -> String {
    let what = match (m.tool_calls.is_empty(), &m.tool_call_id) {
        (false, _) => format!("tool call(s) {}", m.call_ids().join(", ")),
        (true, Some(id)) => format!("result of {id}"),
        (true, None) => format!("{:?}", clip(&m.content, 60)),
    };
    format!("#{i} ({}, {what})", m.role)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::fixtures::stored;

    fn read(messages: Vec<Message>, integrity: &str) -> StoreObservation {
        StoreObservation::Read {
            path: "state.db".into(),
            integrity: integrity.into(),
            messages: Ok(messages),
        }
    }

    fn obs(at_kill: Option<StoreObservation>, end: Vec<Message>) -> Observation {
        let s = crate::oracle::fixtures::scenario("expect: error");
        let mut o = crate::oracle::fixtures::healthy(
            &s,
            crate::oracle::fixtures::end(0, true, false, "done"),
        );
        o.store_at_kill = at_kill;
        o.store = read(end, "ok");
        o
    }

    fn turn() -> Vec<Message> {
        vec![
            stored("user", "run the job", None, &[]),
            stored("assistant", "", None, &["call_1"]),
        ]
    }

    #[test]
    fn a_row_without_a_copy_has_no_such_check() {
        assert!(check(&obs(None, turn())).is_none());
    }

    #[test]
    fn a_store_that_keeps_what_it_held_passes_with_repairs_between() {
        let mut end = turn();
        end.push(stored(
            "tool",
            "interrupted: not re-run",
            Some("call_1"),
            &[],
        ));
        end.push(stored("user", "probe", None, &[]));
        let c = check(&obs(Some(read(turn(), "ok")), end)).unwrap();
        assert!(c.violations().is_empty(), "{:?}", c.violations());
    }

    #[test]
    fn a_rolled_back_tool_call_is_named() {
        let end = vec![
            stored("user", "run the job", None, &[]),
            stored("user", "probe", None, &[]),
        ];
        let c = check(&obs(Some(read(turn(), "ok")), end)).unwrap();
        let v = c.violations();
        assert_eq!(v.len(), 1);
        assert!(
            v[0].contains("1 of the 2 message(s)")
                && v[0].contains("#1 (assistant, tool call(s) call_1)"),
            "{v:?}"
        );
    }

    fn finished_step() -> Vec<Message> {
        let mut m = turn();
        m.push(stored("tool", "step-one", Some("call_1"), &[]));
        m
    }

    #[test]
    fn a_store_short_at_the_kill_fails_against_the_copy_taken_when_armed() {
        // A store rewritten without a transaction, killed mid-rewrite: the
        // copy at the kill holds only the user turn, and so does the end.
        let short = vec![stored("user", "run the job", None, &[])];
        let mut end = short.clone();
        end.push(stored("user", "probe", None, &[]));
        let mut o = obs(Some(read(short, "ok")), end);
        // Judged on the copy at the kill alone (as before the copy at
        // arming), the loss is invisible.
        let c = check(&o).unwrap();
        assert!(!c.failed() && !c.not_checked(), "{:?}", c.violations());
        o.store_at_arm = Some(read(finished_step(), "ok"));
        let v = check(&o).unwrap().violations().to_vec();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("2 of the 3 message(s) the store held when the kill's trigger armed are gone as the kill left it")
                && v[0].contains("#1 (assistant, tool call(s) call_1)")
                && v[0].contains("#2 (tool, result of call_1)"),
            "{v:?}"
        );
    }

    #[test]
    fn an_empty_or_missing_store_at_the_kill_is_a_loss_when_it_held_messages() {
        for at_kill in [
            read(vec![], "ok"),
            StoreObservation::Missing { path: "x".into() },
        ] {
            let mut o = obs(Some(at_kill), vec![stored("user", "probe", None, &[])]);
            o.store_at_arm = Some(read(finished_step(), "ok"));
            let v = check(&o).unwrap().violations().to_vec();
            assert!(v[0].contains("3 of the 3 message(s)"), "{v:?}");
            // Nothing held when armed either: nothing to lose.
            o.store_at_arm = Some(StoreObservation::Missing { path: "x".into() });
            let c = check(&o).unwrap();
            assert!(!c.failed(), "{:?}", c.violations());
        }
    }

    #[test]
    fn a_kept_store_passes_and_a_torn_copy_at_arming_is_not_checked() {
        let mut end = finished_step();
        end.push(stored("assistant", "", None, &["call_2"]));
        end.push(stored(
            "tool",
            "interrupted: not re-run",
            Some("call_2"),
            &[],
        ));
        let mut at_kill = finished_step();
        at_kill.push(stored("assistant", "", None, &["call_2"]));
        let mut o = obs(Some(read(at_kill, "ok")), end);
        o.store_at_arm = Some(read(finished_step(), "ok"));
        let c = check(&o).unwrap();
        assert!(!c.failed() && !c.not_checked(), "{:?}", c.violations());
        o.store_at_arm = Some(read(finished_step(), "*** in database main ***"));
        let why = check(&o).unwrap().not_checked_reason().unwrap().to_string();
        assert!(why.contains("taken when the kill's trigger armed"), "{why}");
    }

    #[test]
    fn a_torn_store_fails_and_nothing_persisted_is_not_checked() {
        let torn = read(
            turn(),
            "*** in database main ***\nPage 3: btreeInitPage() returns error code 11",
        );
        let c = check(&obs(Some(torn), turn())).unwrap();
        assert!(
            c.violations()[0].contains("the kill left the store torn"),
            "{:?}",
            c.violations()
        );
        let torn = StoreObservation::Jsonl {
            glob: "*.jsonl".into(),
            read: crate::store::TranscriptRead {
                malformed: 1,
                malformed_examples: vec!["s.jsonl:3: {\"type\":\"assist".into()],
                ..Default::default()
            },
            messages: Ok(turn()),
        };
        let c = check(&obs(Some(torn), turn())).unwrap();
        assert!(
            c.violations()[0].contains("the kill left the transcript torn: 1 line(s)"),
            "{:?}",
            c.violations()
        );
        let none = StoreObservation::Missing { path: "x".into() };
        let c = check(&obs(Some(none), turn())).unwrap();
        assert!(c.not_checked());
    }
}
