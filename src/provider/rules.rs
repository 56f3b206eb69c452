//! Responder rules: which reply a faulted-turn main call gets, chosen by what the
//! request shows (its main-call index, whether it follows a tool result,
//! whether it is a subagent's), optionally held until tagged
//! processes exist.

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
    /// after the faulted turn's first main call (which is at 0).
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
}

impl When {
    /// `index` counts the parent's main calls, or the subagent's calls when
    /// `subagent` is true.
    pub fn matches(&self, index: u64, after_tool: bool, subagent: bool) -> bool {
        self.matches_at(index, after_tool, subagent, 0.0)
    }

    /// [`When::matches`] for a call `elapsed` seconds after the turn's first
    /// main call.
    pub fn matches_at(&self, index: u64, after_tool: bool, subagent: bool, elapsed: f64) -> bool {
        self.subagent.unwrap_or(false) == subagent
            && self.call.as_ref().is_none_or(|c| c.matches(index))
            && self.after_tool.is_none_or(|t| t == after_tool)
            && self.within.is_none_or(|w| elapsed < w)
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

/// First rule for the parent's main calls whose `when` matches, if any.
pub fn pick(rules: &[Rule], index: u64, after_tool: bool) -> Option<&Rule> {
    pick_indexed(rules, index, after_tool, false).map(|(_, r)| r)
}

/// First rule whose `when` matches, with its index.
pub fn pick_indexed(
    rules: &[Rule],
    index: u64,
    after_tool: bool,
    subagent: bool,
) -> Option<(usize, &Rule)> {
    pick_at(rules, index, after_tool, subagent, 0.0)
}

/// [`pick_indexed`] for a call `elapsed` seconds after the turn's first main
/// call (for `within` rules).
pub fn pick_at(
    rules: &[Rule],
    index: u64,
    after_tool: bool,
    subagent: bool,
    elapsed: f64,
) -> Option<(usize, &Rule)> {
    rules
        .iter()
        .enumerate()
        .find(|(_, r)| r.when.matches_at(index, after_tool, subagent, elapsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(yaml: &str) -> Vec<Rule> {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn first_matching_rule_wins() {
        let r = rules(
            "- {when: {call: 0}, reply: {kind: hang}}\n\
             - {when: {after_tool: true}, reply: {kind: text, text: done}}\n\
             - {reply: {kind: error, status: 500}}\n",
        );
        assert_eq!(pick(&r, 0, false).unwrap().reply.kind_name(), "hang");
        assert_eq!(pick(&r, 0, true).unwrap().reply.kind_name(), "hang");
        assert_eq!(pick(&r, 1, true).unwrap().reply.kind_name(), "text");
        assert_eq!(pick(&r, 1, false).unwrap().reply.kind_name(), "error");
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
        assert_eq!(pick_at(&r, 0, false, false, 0.0).unwrap().0, 0);
        assert_eq!(pick_at(&r, 5, false, false, 7.9).unwrap().0, 0);
        assert_eq!(pick_at(&r, 6, false, false, 8.0).unwrap().0, 1);
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
        let kind = |i, sub| pick_indexed(&r, i, false, sub).map(|(n, _)| n);
        assert_eq!(kind(0, true), Some(0));
        assert_eq!(kind(1, true), Some(1));
        assert_eq!(kind(0, false), Some(2));
        assert_eq!(pick(&r, 0, false).unwrap().reply.kind_name(), "text");
    }

    #[test]
    fn no_rule_matches_when_none_fits() {
        let r = rules("- {when: {call: 5}, reply: {kind: hang}}\n");
        assert!(pick(&r, 0, false).is_none());
    }
}
