//! `store_kept_across_kill`, for a row whose kill is aimed at a store write
//! (`at: {store_write_after_calls: N}`): the store as the kill left it (the
//! copy chaosrun took before the restart) must open and pass its integrity
//! check, or for JSONL transcripts hold only JSON records (a store torn by
//! the kill is what the restarted agent reads), and
//! every message it held must still be in the store at the end, in order (a
//! restarted agent that rolls back, rewrites or drops what was durable loses
//! completed work, which no request to the model need show). Not checked
//! when nothing was persisted before the kill, when no copy could be taken,
//! or when the final store cannot be read (that is `integrity_check`'s).

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
    let held = match at_kill {
        StoreObservation::Missing { .. } => {
            return Some(Check::skipped(inv, NAME, "the agent had persisted nothing when it was killed"))
        }
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
    let kept = match messages_of(&obs.store) {
        Ok(m) => m,
        Err(why) => return Some(Check::skipped(inv, NAME, format!("the final store: {why}"))),
    };
    Some(Check::new(inv, NAME, lost(held, kept)))
}

/// The messages of `held` that `kept` no longer has, in order (each matched
/// at most once, after the previous match), named.
fn lost(held: &[Message], kept: &[Message]) -> Vec<String> {
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
        "{} of the {} message(s) the store held when the agent was killed {} gone after the restart: {}{}",
        gone.len(),
        held.len(),
        if gone.len() == 1 { "is" } else { "are" },
        named.join("; "),
        if more > 0 { format!("; and {more} more") } else { String::new() }
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
