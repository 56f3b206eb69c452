//! `reuse_call_id`: the real answer's tool calls re-keyed to one fixed id
//! (`id`, default `call_reused`; an answer's second call on is `ID_2`,
//! `ID_3`…), so every answer the rule fires on issues ids an earlier one
//! already did: a stale replayed reply, as a cache or a proxy that replays
//! an answer leaves it. A value fault: see the family's doc.

use serde::{Deserialize, Serialize};

use crate::provider::cassette::Recorded;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReuseCallId {
    #[serde(default = "default_id")]
    pub id: String,
}

fn default_id() -> String {
    "call_reused".into()
}

impl Default for ReuseCallId {
    fn default() -> Self {
        ReuseCallId { id: default_id() }
    }
}

impl crate::kinds::Kind for ReuseCallId {
    const NAME: &'static str = "reuse_call_id";
}

impl super::RelayFault for ReuseCallId {
    fn mutates(&self) -> bool {
        true
    }

    fn mutate(&self, events: &mut Vec<Recorded>) {
        let mut k = 0;
        for ev in events.iter_mut() {
            if let Recorded::ToolCall { id, .. } = ev {
                k += 1;
                *id = match k {
                    1 => self.id.clone(),
                    _ => format!("{}_{k}", self.id),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::upstream::faults::RelayFault;

    fn call(id: &str) -> Recorded {
        Recorded::ToolCall { at: 0.0, id: id.into(), name: "shell".into(), arguments: "{}".into() }
    }

    fn ids(ev: &[Recorded]) -> Vec<&str> {
        ev.iter()
            .filter_map(|e| match e {
                Recorded::ToolCall { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn every_answer_gets_the_same_ids() {
        let f: ReuseCallId = serde_json::from_str("{}").unwrap();
        let mut a = vec![call("toolu_1"), call("toolu_2")];
        let mut b = vec![Recorded::Text { at: 0.0, text: "x".into() }, call("toolu_9")];
        f.mutate(&mut a);
        f.mutate(&mut b);
        assert_eq!(ids(&a), ["call_reused", "call_reused_2"]);
        assert_eq!(ids(&b), ["call_reused"]);
        let f = ReuseCallId { id: "stale".into() };
        f.mutate(&mut a);
        assert_eq!(ids(&a), ["stale", "stale_2"]);
    }
}
