//! Responder rules: which reply a faulted-turn main call gets, chosen by what the
//! request shows (its main-call index, whether it follows a tool result,
//! whether it is a subagent's) and how often the rule fires (every Nth call,
//! or a seeded draw per call), optionally held until tagged processes exist.

use serde::{Deserialize, Serialize};

use super::replies::Reply;

/// Matches the index of a main call within the faulted turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CallMatch {
    /// Exactly this index (from 0).
    Index(u64),
    /// A range: `{from: 2}` or `{from: 1, to: 3}` (both inclusive).
    Range {
        #[serde(default)]
        from: u64,
        #[serde(default)]
        to: Option<u64>,
    },
}

impl CallMatch {
    pub fn matches(&self, index: u64) -> bool {
        match *self {
            CallMatch::Index(i) => i == index,
            CallMatch::Range { from, to } => index >= from && to.is_none_or(|t| index <= t),
        }
    }
}

/// Conditions of a rule; every given condition must hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<CallMatch>,
    /// Whether the request follows a tool result: the conversation's latest
    /// `tool` message with no answer of the model after it, whatever else
    /// follows it (an agent's note after the result, in the same message or
    /// a further one): [`crate::message::after_tool`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_tool: Option<bool>,
    /// A time-based episode: the call arrives less than this many seconds
    /// after the faulted turn's first main call (which is at 0); a
    /// subagent's call too (`subagent: true`), counted from the same call.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::units::opt_seconds"
    )]
    pub within: Option<f64>,
    /// `true`: the rule answers the subagent's calls (requests whose first
    /// user message carries the row's `[[subagent:NONCE]]` marker; `call`
    /// then counts them apart). Absent or `false`: the parent's main calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent: Option<bool>,
    /// Fires on every Nth counted call only (1-based: `every: 3` is the
    /// 3rd, 6th, 9th call, indices 2, 5, 8), 1 to [`crate::units::MAX_COUNT`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_count_1"
    )]
    pub every: Option<usize>,
    /// Fires on a call with this probability (above 0, at most 1), drawn
    /// per call from the scenario's seed, the rule's place and the call's
    /// index: the same `--seed` fires on the same calls ([`draw`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "probability"
    )]
    pub p: Option<f64>,
}

/// An optional count of 1 to [`crate::units::MAX_COUNT`].
fn opt_count_1<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    #[derive(Deserialize)]
    struct Count(#[serde(deserialize_with = "crate::units::count_1")] usize);
    Option::<Count>::deserialize(d).map(|c| c.map(|Count(n)| n))
}

/// A probability above 0 and at most 1.
fn probability<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let p = f64::deserialize(d)?;
    if p > 0.0 && p <= 1.0 {
        Ok(Some(p))
    } else {
        Err(serde::de::Error::custom(format!(
            "`p` is {p}; a probability here is above 0 and at most 1"
        )))
    }
}

/// The draw of rule `rule` on call `index` under `seed`: a number in
/// [0, 1), the same for the same three inputs on every machine and Rust
/// version (SplitMix64's finaliser, not a library generator whose stream
/// may change between releases).
pub fn draw(seed: u64, rule: usize, index: u64) -> f64 {
    let mut z = seed
        ^ (rule as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ index.wrapping_mul(0xd1b5_4a32_d192_ed03);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// What one call shows a rule: its index among the counted calls (the
/// parent's main calls, or the subagent's), whether it follows a tool
/// result, whether it is the subagent's, its time since the turn's first
/// main call, and the scenario's seed (for `p` draws).
#[derive(Debug, Clone, Copy, Default)]
pub struct Call {
    pub index: u64,
    pub after_tool: bool,
    pub subagent: bool,
    pub elapsed: f64,
    pub seed: u64,
}

impl When {
    /// Whether rule number `rule` fires on `call`.
    pub fn matches(&self, rule: usize, call: &Call) -> bool {
        self.subagent.unwrap_or(false) == call.subagent
            && self.call.as_ref().is_none_or(|c| c.matches(call.index))
            && self.after_tool.is_none_or(|t| t == call.after_tool)
            && self.within.is_none_or(|w| call.elapsed < w)
            && self.every.is_none_or(|n| (call.index + 1) % n as u64 == 0)
            && self.p.is_none_or(|p| draw(call.seed, rule, call.index) < p)
    }
}

/// Hold the reply until at least `count` tagged processes whose command line
/// contains `cmdline` exist, or `timeout` seconds pass (then reply anyway).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitFor {
    #[serde(deserialize_with = "crate::units::count_1")]
    pub count: usize,
    pub cmdline: String,
    #[serde(
        default = "default_wait_timeout",
        deserialize_with = "crate::units::seconds"
    )]
    pub timeout: f64,
}

fn default_wait_timeout() -> f64 {
    20.0
}

/// One responder rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default)]
    pub when: When,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for: Option<WaitFor>,
    pub reply: Reply,
}

/// First rule whose `when` matches `call`, with its index.
pub fn pick<'a>(rules: &'a [Rule], call: &Call) -> Option<(usize, &'a Rule)> {
    rules
        .iter()
        .enumerate()
        .find(|(i, r)| r.when.matches(*i, call))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(yaml: &str) -> Vec<Rule> {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn at(index: u64, after_tool: bool) -> Call {
        Call {
            index,
            after_tool,
            ..Call::default()
        }
    }

    fn kind(r: &[Rule], call: Call) -> &str {
        pick(r, &call).unwrap().1.reply.kind_name()
    }

    #[test]
    fn first_matching_rule_wins() {
        let r = rules(
            "- {when: {call: 0}, reply: {kind: hang}}\n\
             - {when: {after_tool: true}, reply: {kind: text, text: done}}\n\
             - {reply: {kind: error, status: 500}}\n",
        );
        assert_eq!(kind(&r, at(0, false)), "hang");
        assert_eq!(kind(&r, at(0, true)), "hang");
        assert_eq!(kind(&r, at(1, true)), "text");
        assert_eq!(kind(&r, at(1, false)), "error");
    }

    #[test]
    fn ranges_are_inclusive() {
        let m: CallMatch = serde_yaml::from_str("{from: 1, to: 2}").unwrap();
        assert!(!m.matches(0) && m.matches(1) && m.matches(2) && !m.matches(3));
        let open: CallMatch = serde_yaml::from_str("{from: 3}").unwrap();
        assert!(!open.matches(2) && open.matches(300));
    }

    #[test]
    fn within_is_a_time_based_episode() {
        let r = rules(
            "- {when: {within: 8}, reply: {kind: error, status: 503}}\n\
             - {reply: {kind: text, text: ok}}\n",
        );
        let timed = |index, elapsed| {
            let call = Call {
                elapsed,
                ..at(index, false)
            };
            pick(&r, &call).unwrap().0
        };
        assert_eq!(timed(0, 0.0), 0);
        assert_eq!(timed(5, 7.9), 0);
        assert_eq!(timed(6, 8.0), 1);
        let bad = serde_yaml::from_str::<Vec<Rule>>("- {when: {within: -1}, reply: {kind: hang}}");
        assert!(bad.unwrap_err().to_string().contains("negative"));
    }

    #[test]
    fn subagent_rules_answer_only_the_subagents_calls() {
        let r = rules(
            "- {when: {subagent: true, call: 0}, reply: {kind: hang}}\n\
             - {when: {subagent: true}, reply: {kind: text, text: sub}}\n\
             - {reply: {kind: text, text: parent}}\n",
        );
        let rule = |index, subagent| {
            let call = Call {
                subagent,
                ..at(index, false)
            };
            pick(&r, &call).map(|(n, _)| n)
        };
        assert_eq!(rule(0, true), Some(0));
        assert_eq!(rule(1, true), Some(1));
        assert_eq!(rule(0, false), Some(2));
        assert_eq!(kind(&r, at(0, false)), "text");
    }

    #[test]
    fn no_rule_matches_when_none_fits() {
        let r = rules("- {when: {call: 5}, reply: {kind: hang}}\n");
        assert!(pick(&r, &at(0, false)).is_none());
    }

    #[test]
    fn every_fires_on_each_nth_call() {
        let r = rules(
            "- {when: {every: 3}, reply: {kind: text, text: cut, finish_reason: length}}\n\
             - {reply: {kind: text, text: ok}}\n",
        );
        let fired: Vec<u64> = (0..10)
            .filter(|&i| pick(&r, &at(i, false)).unwrap().0 == 0)
            .collect();
        assert_eq!(fired, [2, 5, 8]);
        for bad in ["0", "10001"] {
            let e = serde_yaml::from_str::<Vec<Rule>>(&format!(
                "- {{when: {{every: {bad}}}, reply: {{kind: hang}}}}"
            ));
            assert!(
                e.unwrap_err().to_string().contains("out of bounds"),
                "{bad}"
            );
        }
    }

    #[test]
    fn p_draws_per_call_from_the_seed_and_replays() {
        let r = rules(
            "- {when: {p: 0.3}, reply: {kind: text, text: \"\"}}\n\
             - {reply: {kind: text, text: ok}}\n",
        );
        let fired = |seed| -> Vec<u64> {
            (0..1000)
                .filter(|&i| {
                    pick(
                        &r,
                        &Call {
                            seed,
                            ..at(i, false)
                        },
                    )
                    .unwrap()
                    .0 == 0
                })
                .collect()
        };
        let (a, b) = (fired(7), fired(8));
        assert_eq!(a, fired(7), "the same seed fires on the same calls");
        assert_ne!(a, b, "another seed fires on other calls");
        for calls in [&a, &b] {
            assert!(
                (240..=360).contains(&calls.len()),
                "about 300 of 1000: {}",
                calls.len()
            );
        }
        // A fixed figure: the draw must not change between releases, or a
        // printed seed would no longer replay an older run.
        assert_eq!(&a[..5], &fired_golden()[..]);
        for bad in ["0", "-0.5", "1.5", ".nan"] {
            let e = serde_yaml::from_str::<Vec<Rule>>(&format!(
                "- {{when: {{p: {bad}}}, reply: {{kind: hang}}}}"
            ));
            assert!(e.unwrap_err().to_string().contains("probability"), "{bad}");
        }
        let always = rules("- {when: {p: 1}, reply: {kind: hang}}\n");
        assert!((0..100).all(|i| pick(
            &always,
            &Call {
                seed: 3,
                ..at(i, false)
            }
        )
        .is_some()));
    }

    /// The first five calls rule 0 at `p: 0.3` fires on under seed 7.
    fn fired_golden() -> [u64; 5] {
        [0, 4, 5, 9, 10]
    }
}
