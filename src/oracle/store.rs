//! Store integrity: the agent's SQLite store passes `PRAGMA integrity_check`
//! (a Postgres or JSONL store has no such check: not checked, with why, and
//! for JSONL what the read skipped).
//! And store configuration errors: a healthy store that the profile's query
//! cannot read (bad SQL, wrong table) or a Postgres store that cannot be
//! reached is chaosrun's configuration, not the agent's fault: the scenario is
//! an `ERROR` naming the fix, never a quiet "not checked".

use super::{Check, Invariant};
use crate::observe::{Observation, StoreObservation};

/// Why the profile's store could not be used, when that is a configuration
/// error rather than something the agent did.
pub fn configuration_error(obs: &Observation) -> Option<String> {
    match &obs.store {
        StoreObservation::Read {
            path,
            integrity,
            messages: Err(e),
        } if integrity == "ok" => Some(format!(
            "the adapter profile's store query failed on {path}: {e}; fix `store.messages_sql` (columns role, content, tool_call_id, tool_calls; with `shape: items`, kind, content, call_id; the session bound as :session_id)"
        )),
        StoreObservation::Postgres {
            dsn,
            messages: Err(e),
        } => Some(format!(
            "the adapter profile's Postgres store ({dsn}) could not be read: {e}; fix `store.postgres` or `store.messages_sql`"
        )),
        StoreObservation::Jsonl {
            glob,
            messages: Err(e),
            ..
        } => Some(format!(
            "the adapter profile's JSONL mapping read {glob} but made no messages: {e}; fix `store.records` (each rule's `when` names field values the transcript's records have)"
        )),
        _ => None,
    }
}

pub fn check(obs: &Observation) -> Vec<Check> {
    let inv = Invariant::StoreIntegrity;
    let name = "integrity_check";
    vec![match &obs.store {
        StoreObservation::NotConfigured => {
            Check::skipped(inv, name, "the adapter profile names no durable store")
        }
        StoreObservation::Missing { path } if path.contains(['*', '?']) => Check::new(
            inv,
            name,
            vec![format!(
                "no transcript matches the profile's store glob {path} after the run"
            )],
        ),
        StoreObservation::Missing { path } => Check::new(
            inv,
            name,
            vec![format!(
                "the store {path} named by the profile does not exist after the run"
            )],
        ),
        StoreObservation::Unreadable { path, error } => Check::new(
            inv,
            name,
            vec![format!("the store {path} cannot be opened: {error}")],
        ),
        StoreObservation::Postgres { .. } => Check::skipped(
            inv,
            name,
            "PRAGMA integrity_check is SQLite's; a Postgres store's integrity is the server's",
        ),
        StoreObservation::Jsonl { read, .. } => {
            let caveats = read.caveats();
            Check::skipped(
                inv,
                name,
                if caveats.is_empty() {
                    "a JSONL transcript has no integrity check of SQLite's kind".to_string()
                } else {
                    format!("a JSONL transcript has no integrity check of SQLite's kind; {caveats}")
                },
            )
        }
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
    }]
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
        assert!(configuration_error(&o)
            .unwrap()
            .contains("no such table: mesages"));
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
        assert!(configuration_error(&o).unwrap().contains("cannot connect"));
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
    fn a_jsonl_store_is_not_checked_and_says_what_was_skipped() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.store = StoreObservation::Jsonl {
            glob: "/h/.codex/sessions/**/*.jsonl".into(),
            read: crate::observe::TranscriptRead {
                malformed: 2,
                malformed_examples: vec!["r.jsonl:3: EOF while parsing".into()],
                ..Default::default()
            },
            messages: Ok(vec![]),
        };
        let c = &check(&o)[0];
        assert!(c.not_checked());
        let why = format!("{c:?}");
        assert!(
            why.contains("2 malformed line(s)") && why.contains("r.jsonl:3"),
            "{why}"
        );
        assert_eq!(configuration_error(&o), None);
        o.store = StoreObservation::Jsonl {
            glob: "g".into(),
            read: Default::default(),
            messages: Err("no record of 5 read matched a rule".into()),
        };
        assert!(configuration_error(&o).unwrap().contains("store.records"));
    }
}
