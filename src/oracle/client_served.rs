//! Evidence that a row's faults on the ACP client side landed
//! (`client_fault_served`, fault exercised): the agent asked chaosrun's
//! client side, at least once, a request one of the row's `client:` rules
//! answers. An agent that runs the command in its own shell, or never asks
//! permission, never meets the fault: the row fails here, naming that,
//! instead of on whatever its answer then lacked.

use std::collections::BTreeMap;

use super::{Check, Invariant};
use crate::observe::{Event, Observation, CLIENT_SETTLED_AT_CANCEL};
use crate::scenarios::client;
use crate::scenarios::Scenario;

const NAME: &str = "client_fault_served";

/// The requests the agent made of the client side, per method, as the
/// drive recorded their answers (a held request settled at the cancel is
/// recorded twice: counted once).
fn asked(obs: &Observation) -> BTreeMap<&str, u64> {
    let mut n = BTreeMap::new();
    for t in &obs.events {
        if let Event::ClientCall {
            method, outcome, ..
        } = &t.event
        {
            if outcome != CLIENT_SETTLED_AT_CANCEL {
                *n.entry(method.as_str()).or_insert(0) += 1;
            }
        }
    }
    n
}

/// `None` for a row without client rules.
pub fn exercised(s: &Scenario, obs: &Observation) -> Option<Check> {
    if s.client.is_empty() {
        return None;
    }
    let asked = asked(obs);
    let landed = asked
        .iter()
        .any(|(m, n)| (0..*n).any(|i| client::plan(&s.client, m, i).is_some()));
    let v = match landed {
        true => Vec::new(),
        false => {
            let methods: Vec<&str> = s.client.iter().map(|r| r.when.method.as_str()).collect();
            let seen: Vec<String> = asked.iter().map(|(m, n)| format!("{m} ×{n}")).collect();
            vec![format!(
                "no client rule answered a request: the agent never asked the client side {} as the rules match (it asked {}); a command it ran in its own shell, or a permission it never asked for, meets no client fault",
                methods.join(", "),
                match seen.is_empty() {
                    true => "nothing".to_string(),
                    false => seen.join(", "),
                }
            )]
        }
    };
    Some(Check::new(Invariant::Exercised, NAME, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Timed;
    use crate::oracle::fixtures::scenario;

    fn call(method: &str, outcome: &str) -> Timed {
        Timed {
            at: 1.0,
            worker: None,
            event: Event::ClientCall {
                turn: Some(0),
                method: method.into(),
                outcome: outcome.into(),
            },
        }
    }

    fn obs(events: Vec<Timed>) -> Observation {
        Observation {
            events,
            ..Observation::default()
        }
    }

    const ROW: &str = "client:\n  - when: {method: terminal/create, call: 1}\n    reply: {kind: never}\nexpect: ended";

    #[test]
    fn a_request_a_rule_matches_is_the_evidence() {
        let s = scenario(ROW);
        let two = obs(vec![
            call("terminal/create", "ok"),
            call("terminal/create", "held: never answered"),
        ]);
        assert_eq!(
            exercised(&s, &two).unwrap().status,
            super::super::Status::Pass
        );
        // Only call 0 came: the rule (call 1) never answered one.
        let one = obs(vec![call("terminal/create", "ok")]);
        let c = exercised(&s, &one).unwrap();
        assert!(c.failed());
        assert!(
            c.violations()[0].contains("it asked terminal/create ×1"),
            "{c:?}"
        );
    }

    #[test]
    fn an_agent_that_never_asks_the_client_fails_naming_it() {
        let s = scenario(ROW);
        let c = exercised(&s, &obs(vec![call("fs/read_text_file", "ok")])).unwrap();
        assert!(c.violations()[0].contains("never asked the client side terminal/create"));
        let none = exercised(&s, &obs(vec![])).unwrap();
        assert!(
            none.violations()[0].contains("(it asked nothing)"),
            "{none:?}"
        );
        assert!(exercised(&scenario("expect: ended"), &obs(vec![])).is_none());
    }

    #[test]
    fn a_held_request_settled_at_the_cancel_counts_once() {
        let s = scenario(ROW);
        let held = obs(vec![
            call("terminal/create", "held: never answered"),
            call("terminal/create", CLIENT_SETTLED_AT_CANCEL),
        ]);
        assert!(exercised(&s, &held).unwrap().failed());
    }
}
