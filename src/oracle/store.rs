//! Store integrity: the agent wrote its store at all (`store_written`, made
//! only when the store is missing: a fail when the agent ended a turn and
//! persisted nothing, not checked when it was stopped before any turn
//! ended; a missing store is never an `integrity_check` failure too);
//! the agent's SQLite store passes `PRAGMA integrity_check`;
//! a JSONL transcript has every line a JSON object (a torn or garbled record
//! is corruption an agent reads back on resume; as many such lines as a
//! row's `store_damage` left are chaosrun's, not counted); a Postgres store has no
//! such check (not checked, with why), nor has a transcript whose read was
//! capped or that resolved outside HOME (not checked, saying what was skipped).
//! And store configuration errors: a healthy store that the profile's query
//! cannot read (bad SQL, wrong table) or a Postgres store that cannot be
//! reached is chaosrun's configuration, not the agent's fault: the scenario is
//! an `ERROR` naming the fix, never a quiet "not checked". So is an exec-mode
//! turn whose argv needed a captured value the agent never printed.

use super::cause::{ErrorCause, CAPTURE_FIX, STORE};
use super::{Check, Invariant};
use crate::observe::{Observation, StoreObservation};

/// Why the profile's store (or a captured value) could not be used, when that
/// is a configuration error rather than something the agent did.
pub fn configuration_error(obs: &Observation) -> Option<ErrorCause> {
    if let Some(cause) = missing_capture(obs) {
        return Some(ErrorCause::Capture(cause));
    }
    match &obs.store {
        StoreObservation::Read {
            path,
            integrity,
            messages: Err(e),
        } if integrity == "ok" => Some(format!(
            "{}{path}: {e}; fix `store.messages_sql` (columns role, content, tool_call_id, tool_calls; with `shape: items`, kind, content, call_id; the session bound as :session_id)",
            STORE[0]
        )),
        StoreObservation::Postgres {
            dsn,
            messages: Err(e),
        } => Some(format!(
            "{}{dsn}) could not be read: {e}; fix `store.postgres` or `store.messages_sql`",
            STORE[1]
        )),
        StoreObservation::Jsonl {
            glob,
            messages: Err(e),
            ..
        } => Some(format!(
            "{}{glob} but made no messages: {e}; fix `store.records` (each rule's `when` names field values the transcript's records have)",
            STORE[2]
        )),
        _ => None,
    }
    .map(ErrorCause::Store)
}

/// Exec mode: a turn that needed a captured value the agent never printed
/// (never a silent empty string in its argv). When an earlier turn crashed
/// before it printed anything (a config it could not load), the crash is
/// quoted as the cause instead of the capture's selector.
fn missing_capture(obs: &Observation) -> Option<String> {
    obs.events.iter().find_map(|t| match &t.event {
        crate::observe::Event::CaptureMissing { turn, name } => Some(format!(
            "turn {turn} needs `{{{{captured.{name}}}}}{CAPTURE_FIX}{name}`{}",
            crash_before(obs, Some(*turn)).unwrap_or_else(|| {
                "; fix the capture's selector (see the turn's stdout.log)".into()
            })
        )),
        _ => None,
    })
}

/// Characters of a crashed turn's stderr quoted.
const CRASH_QUOTE: usize = 600;

/// Exec mode: why a capture could not match, when the turn it would have
/// read (the last one before turn `before`, else the first) failed with nothing
/// on `final`: `: turn N crashed before it printed anything to capture
/// (exit 1); its stderr: "…"; fix what made it fail, not the capture's
/// selector`. `None` when no turn crashed so.
pub(crate) fn crash_before(obs: &Observation, before: Option<u64>) -> Option<String> {
    let mut ends = obs.events.iter().filter_map(|t| match &t.event {
        crate::observe::Event::TurnEnd(e) if before.is_none_or(|b| e.i < b) => Some(e),
        _ => None,
    });
    let end = match before {
        Some(_) => ends.next_back()?,
        None => ends.next()?,
    };
    if !end.failed || !end.final_text.trim().is_empty() {
        return None;
    }
    let stderr = end.stderr.as_deref().map(str::trim).unwrap_or_default();
    let quoted = match stderr.is_empty() {
        true => "its stderr was empty".to_string(),
        false => {
            let cut = stderr.len().saturating_sub(CRASH_QUOTE);
            let cut = (cut..=stderr.len())
                .find(|i| stderr.is_char_boundary(*i))
                .unwrap_or(0);
            format!("its stderr ended: {:?}", &stderr[cut..])
        }
    };
    Some(format!(
        ": turn {} crashed before it printed anything to capture ({}); {quoted}; fix what made it fail (its config, its arguments), not the capture's selector",
        end.i, end.exit_reason
    ))
}

pub fn check(obs: &Observation) -> Vec<Check> {
    match &obs.store {
        StoreObservation::Missing { path } => vec![written(obs, path), integrity(obs)],
        _ => vec![integrity(obs)],
    }
}

/// `store_written`, for a store that does not exist after the run: a fail
/// when the agent ended a turn (it had the chance to persist it), not
/// checked when it was stopped before any turn ended.
fn written(obs: &Observation, path: &str) -> Check {
    let (inv, name) = (Invariant::StoreIntegrity, "store_written");
    let ended: Vec<u64> = obs
        .events
        .iter()
        .filter_map(|t| match &t.event {
            crate::observe::Event::TurnEnd(e) => Some(e.i),
            _ => None,
        })
        .collect();
    if ended.is_empty() {
        return Check::skipped(
            inv,
            name,
            format!(
                "the agent ended no turn, so nothing had to be persisted yet (no store at {path})"
            ),
        );
    }
    let what = if path.contains(['*', '?']) {
        format!("no transcript matches the profile's store glob {path}")
    } else {
        format!("the store {path} named by the profile does not exist")
    };
    Check::new(
        inv,
        name,
        vec![format!(
            "{what} after the agent ended turn(s) {ended:?}: it persisted nothing (or the profile's `store` points elsewhere: compare with the files under the run's HOME)"
        )],
    )
}

/// The lines that are not JSON records in the transcript as the row's
/// `store_damage` left it: chaosrun's damage, not the agent's (whether the
/// agent resumed past them is `store_resumed_past_damage`'s).
fn planted(obs: &Observation) -> usize {
    match obs.store_damage.as_ref().and_then(|d| d.after.as_ref()) {
        Some(StoreObservation::Jsonl { read, .. }) => read.malformed,
        _ => 0,
    }
}

/// `integrity_check` of a store that exists (or is not configured).
fn integrity(obs: &Observation) -> Check {
    let inv = Invariant::StoreIntegrity;
    let name = "integrity_check";
    match &obs.store {
        StoreObservation::NotConfigured => {
            Check::skipped(inv, name, "the adapter profile names no durable store")
        }
        StoreObservation::Missing { .. } => {
            Check::skipped(inv, name, "no store to check (see store_written)")
        }
        StoreObservation::Unreadable { path, error } => Check::new(
            inv,
            name,
            vec![format!("the store {path} cannot be opened: {error}")],
        ),
        StoreObservation::NotRegular { path, why } => {
            Check::skipped(inv, name, format!("the store {path} {why}; not read"))
        }
        StoreObservation::Postgres { .. } => Check::skipped(
            inv,
            name,
            "PRAGMA integrity_check is SQLite's; a Postgres store's integrity is the server's",
        ),
        StoreObservation::Jsonl { read, .. } if read.malformed > planted(obs) => Check::new(
            inv,
            name,
            vec![format!(
                "{} line(s) of the agent's transcript are not JSON records{}: {}",
                read.malformed,
                match planted(obs) {
                    0 => String::new(),
                    n => format!(" ({n} of them left by the row's `store_damage`)"),
                },
                read.malformed_examples.join("; ")
            )],
        ),
        StoreObservation::Jsonl { read, .. } if read.partial() => Check::skipped(
            inv,
            name,
            format!(
                "every line read is a JSON record, but not all of the transcript was read: {}",
                read.caveats()
            ),
        ),
        StoreObservation::Jsonl { .. } => Check::new(inv, name, vec![]),
        StoreObservation::Read {
            integrity, path, ..
        } => Check::new(
            inv,
            name,
            if integrity == "ok" {
                vec![]
            } else {
                vec![format!(
                    "PRAGMA integrity_check on {path} answered: {integrity}"
                )]
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn a_failing_query_on_a_healthy_store_is_a_configuration_error() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        assert_eq!(configuration_error(&o), None);
        o.store = StoreObservation::Read {
            path: "p".into(),
            integrity: "ok".into(),
            messages: Err("no such table: mesages".into()),
        };
        assert!(matches!(
            configuration_error(&o),
            Some(ErrorCause::Store(c)) if c.contains("no such table: mesages")
        ));
        o.store = StoreObservation::Read {
            path: "p".into(),
            integrity: "Page 3: corrupt".into(),
            messages: Err("malformed".into()),
        };
        assert_eq!(
            configuration_error(&o),
            None,
            "a corrupt store is the agent's"
        );
        o.store = StoreObservation::Postgres {
            dsn: "host=nowhere".into(),
            messages: Err("cannot connect: refused".into()),
        };
        assert!(configuration_error(&o)
            .unwrap()
            .to_string()
            .contains("cannot connect"));
    }

    #[test]
    fn ok_passes_anything_else_fails_unconfigured_is_not_checked() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        assert!(!check(&o)[0].failed());
        o.store = StoreObservation::Read {
            path: "p".into(),
            integrity: "*** in database main ***\nPage 3: btreeInitPage() returns error code 11"
                .into(),
            messages: Err("malformed".into()),
        };
        assert!(check(&o)[0].violations()[0].contains("btreeInitPage"));
        o.store = StoreObservation::NotConfigured;
        assert!(check(&o)[0].not_checked());
    }

    #[test]
    fn a_jsonl_store_passes_when_every_line_parses_fails_on_a_torn_line() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        let read = |malformed, unread_lines| crate::observe::TranscriptRead {
            malformed,
            malformed_examples: vec!["r.jsonl:3: EOF while parsing".into(); malformed.min(1)],
            unread_lines,
            ..Default::default()
        };
        let jsonl = |read| StoreObservation::Jsonl {
            glob: "/h/.codex/sessions/**/*.jsonl".into(),
            read,
            messages: Ok(vec![]),
        };
        o.store = jsonl(read(0, 0));
        let c = &check(&o)[0];
        assert!(!c.failed() && !c.not_checked(), "{c:?}");
        o.store = jsonl(read(2, 0));
        let c = &check(&o)[0];
        assert!(c.failed());
        let why = c.violations()[0].clone();
        assert!(
            why.contains("2 line(s)") && why.contains("r.jsonl:3"),
            "{why}"
        );
        assert_eq!(
            configuration_error(&o),
            None,
            "a torn transcript is the agent's"
        );
        o.store = jsonl(read(0, 1));
        let c = &check(&o)[0];
        assert!(c.not_checked(), "a capped read cannot vouch for the rest");
        assert!(format!("{c:?}").contains("read capped"), "{c:?}");
        o.store = StoreObservation::Jsonl {
            glob: "g".into(),
            read: Default::default(),
            messages: Err("no record of 5 read matched a rule".into()),
        };
        assert!(configuration_error(&o)
            .unwrap()
            .to_string()
            .contains("store.records"));
    }

    /// A missing store is `store_written`'s, never an integrity failure:
    /// a fail once the agent ended a turn, not checked before any turn ended.
    #[test]
    fn a_missing_store_is_store_written_never_integrity() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "done"));
        o.store = StoreObservation::Missing {
            path: "/h/.agent/state.db".into(),
        };
        let c = check(&o);
        let by = |n: &str| c.iter().find(|c| c.name == n).expect(n).clone();
        assert!(by("store_written").failed(), "{c:?}");
        assert!(
            by("store_written").violations()[0].contains("ended turn(s) [0, 1]"),
            "{c:?}"
        );
        assert!(by("integrity_check").not_checked(), "{c:?}");
        assert!(!by("integrity_check").failed());
        // Stopped before any turn ended: nothing had to be persisted.
        o.events
            .retain(|t| !matches!(t.event, crate::observe::Event::TurnEnd(_)));
        let c = check(&o);
        let w = c.iter().find(|c| c.name == "store_written").unwrap();
        assert!(w.not_checked() && !w.failed(), "{c:?}");
        assert!(c.iter().all(|c| !c.failed()), "{c:?}");
    }
}
