//! MCP rules: which reply a request gets, chosen by its method, its index
//! among `tools/call` requests (over every connection, from 0) and the tool
//! it calls. First match wins; an unmatched request gets the healthy answer.

use serde::{Deserialize, Serialize};

use super::replies::Reply;
use crate::provider::CallMatch;

/// Conditions of a rule; every given condition must hold. Without `method`
/// a rule matches `tools/call`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<CallMatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

impl When {
    /// The method this rule answers.
    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("tools/call")
    }

    /// `call_index` is the request's index among `tools/call` requests.
    pub fn matches(&self, method: &str, call_index: Option<u64>, tool: Option<&str>) -> bool {
        self.method() == method
            && self
                .call
                .as_ref()
                .is_none_or(|c| call_index.is_some_and(|i| c.matches(i)))
            && self.tool.as_deref().is_none_or(|t| tool == Some(t))
    }
}

/// One MCP rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default)]
    pub when: When,
    pub reply: Reply,
}

/// The first matching rule, with its index.
pub fn pick<'a>(
    rules: &'a [Rule],
    method: &str,
    call_index: Option<u64>,
    tool: Option<&str>,
) -> Option<(usize, &'a Rule)> {
    rules
        .iter()
        .enumerate()
        .find(|(_, r)| r.when.matches(method, call_index, tool))
}

/// What is wrong with a rule (checked at load): an unknown method, a tool
/// the server does not list (`proxied`: the real server's tools are known
/// only when it runs), a reply kind that does not fit the method.
pub fn check(rule: &Rule, proxied: bool) -> Result<(), String> {
    let m = rule.when.method();
    if !super::jsonrpc::METHODS.contains(&m) {
        return Err(format!(
            "unknown method `{m}`; a rule answers one of {}",
            super::jsonrpc::METHODS.join(", ")
        ));
    }
    if let Some(t) = &rule.when.tool {
        if t != super::jsonrpc::PROBE_TOOL && !proxied {
            return Err(format!(
                "tool `{t}` is not a tool the MCP server lists; it lists only `{}`",
                super::jsonrpc::PROBE_TOOL
            ));
        }
        if m != "tools/call" {
            return Err(format!("`tool` matches `tools/call` requests, not `{m}`"));
        }
    }
    if rule.when.call.is_some() && m != "tools/call" {
        return Err(format!("`call` counts `tools/call` requests, not `{m}`"));
    }
    rule.reply.check(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(yaml: &str) -> Vec<Rule> {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn first_match_wins_by_method_call_and_tool() {
        let r = rules(
            "- {when: {method: initialize}, reply: {kind: list_hang}}\n\
             - {when: {call: 0, tool: probe}, reply: {kind: hang}}\n\
             - {when: {call: {from: 1}}, reply: {kind: crash}}\n",
        );
        assert_eq!(pick(&r, "initialize", None, None).unwrap().0, 0);
        assert_eq!(pick(&r, "tools/call", Some(0), Some("probe")).unwrap().0, 1);
        assert_eq!(pick(&r, "tools/call", Some(0), Some("other")), None);
        assert_eq!(pick(&r, "tools/call", Some(3), Some("x")).unwrap().0, 2);
        assert_eq!(pick(&r, "tools/list", None, None), None);
    }

    #[test]
    fn a_rule_on_an_unknown_tool_or_method_is_refused() {
        for (yaml, says) in [
            (
                "- {when: {tool: prob}, reply: {kind: hang}}",
                "not a tool the MCP server lists",
            ),
            (
                "- {when: {method: tools/lst}, reply: {kind: hang}}",
                "unknown method",
            ),
            (
                "- {when: {method: tools/list, call: 0}, reply: {kind: hang}}",
                "counts `tools/call`",
            ),
            (
                "- {when: {call: 0}, reply: {kind: list_hang}}",
                "use `hang`",
            ),
        ] {
            let e = check(&rules(yaml)[0], false).unwrap_err();
            assert!(e.contains(says), "{yaml}: {e}");
        }
        assert!(check(
            &rules("- {when: {tool: probe}, reply: {kind: hang}}")[0],
            false
        )
        .is_ok());
        // Behind an upstream any tool may be named (checked against its list at start).
        assert!(check(
            &rules("- {when: {tool: echo}, reply: {kind: hang}}")[0],
            true
        )
        .is_ok());
    }
}
