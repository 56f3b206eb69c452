//! Store integrity: the agent's SQLite store passes `PRAGMA integrity_check`.

use super::{Check, Invariant};
use crate::observe::{Observation, StoreObservation};

pub fn check(obs: &Observation) -> Vec<Check> {
    let inv = Invariant::StoreIntegrity;
    let name = "integrity_check";
    vec![match &obs.store {
        StoreObservation::NotConfigured => {
            Check::skipped(inv, name, "the adapter profile names no durable store")
        }
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
}
