//! The row's client faults as the drive carries them out
//! ([`crate::scenarios::client`]): each request's index among its method's
//! requests, the plan of the first rule that matches it, and the requests
//! held unanswered (`never`), bounded: past [`MAX_HELD`] a request is
//! refused instead, so an agent that floods requests cannot grow chaosrun.
//! At a cancel the held `session/request_permission` requests are handed
//! back to be answered `cancelled`, as the protocol says the client does.

use std::collections::HashMap;

use serde_json::Value;

use crate::scenarios::client::{plan, ClientRule, Plan};

/// Requests held unanswered at once, at most.
pub const MAX_HELD: usize = 64;

/// The method whose pending requests a cancel settles.
pub const PERMISSION: &str = "session/request_permission";

/// One request left unanswered.
pub struct Held {
    pub id: Value,
    pub method: String,
    pub turn: Option<u64>,
}

/// The client faults of one agent process.
#[derive(Default)]
pub struct Faults {
    rules: Vec<ClientRule>,
    counts: HashMap<String, u64>,
    held: Vec<Held>,
}

impl Faults {
    pub fn new(rules: Vec<ClientRule>) -> Faults {
        Faults {
            rules,
            ..Faults::default()
        }
    }

    /// The plan for the agent's next request of `method`, if a rule
    /// matches it (counted only when the row has rules).
    pub fn plan(&mut self, method: &str) -> Option<Plan> {
        if self.rules.is_empty() {
            return None;
        }
        let n = self.counts.entry(method.to_string()).or_insert(0);
        let index = *n;
        *n += 1;
        plan(&self.rules, method, index)
    }

    /// Hold `h` unanswered: false when [`MAX_HELD`] are held already.
    pub fn hold(&mut self, h: Held) -> bool {
        if self.held.len() >= MAX_HELD {
            return false;
        }
        self.held.push(h);
        true
    }

    /// The held permission requests, taken to be answered `cancelled`.
    pub fn settle_at_cancel(&mut self) -> Vec<Held> {
        let (settle, keep) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.method == PERMISSION);
        self.held = keep;
        settle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_per_method_holds_a_bounded_number_and_settles_permissions() {
        let rules = serde_yaml::from_str(
            "- when: {method: session/request_permission, call: 1}\n  reply: {kind: never}\n",
        )
        .unwrap();
        let mut f = Faults::new(rules);
        assert_eq!(f.plan(PERMISSION), None);
        assert_eq!(f.plan("fs/read_text_file"), None);
        assert_eq!(f.plan(PERMISSION), Some(Plan::Held));
        let held = |n: u64, m: &str| Held {
            id: json!(n),
            method: m.into(),
            turn: Some(0),
        };
        assert!(f.hold(held(0, "terminal/wait_for_exit")));
        for n in 1..MAX_HELD as u64 {
            assert!(f.hold(held(n, PERMISSION)));
        }
        assert!(!f.hold(held(999, PERMISSION)), "bounded");
        let settled = f.settle_at_cancel();
        assert_eq!(settled.len(), MAX_HELD - 1);
        assert!(settled.iter().all(|h| h.method == PERMISSION));
        assert!(f.settle_at_cancel().is_empty());
    }
}
