//! ACP client faults (a row's `client:` rules): the client side chaosrun
//! serves an ACP agent (`fs/*`, `terminal/*`, `session/request_permission`)
//! failing the way editors fail. One small type per kind implementing
//! [`ClientFault`], registered once in [`ClientReply`]; a kind only says
//! *what* happens to one request ([`Plan`]): the ACP drive (src/driver/acp/)
//! carries it out. Rules are matched by method and
//! by the request's index among that method's requests (from 0); first
//! match wins; an unmatched request is served as usual.

use serde::{Deserialize, Serialize};
use std::time::Duration;

use crate::provider::CallMatch;

crate::kinds::registry! {
    /// What chaosrun's client side does with one of the agent's requests:
    /// `{kind: NAME, ...fields}`.
    "ACP client reply", ClientReply: dyn ClientFault {
        Late(late::Late),
        Never(never::Never),
        RpcError(rpc_error::RpcErrorReply),
        StdinOpen(stdin_open::StdinOpen),
    }
}

/// Every client reply kind's name, in registry order (the docs' list).
pub fn kind_names() -> &'static [&'static str] {
    ClientReply::KINDS
}

/// The client-side methods a rule may name.
pub const METHODS: &[&str] = &[
    "session/request_permission",
    "fs/read_text_file",
    "fs/write_text_file",
    "terminal/create",
    "terminal/output",
    "terminal/wait_for_exit",
    "terminal/kill",
    "terminal/release",
];

/// What happens to one matched request.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Served as usual, after this long.
    After(Duration),
    /// Never answered; a permission request is answered `cancelled` when
    /// the turn is cancelled (as the protocol says the client does).
    Held,
    /// Answered with this JSON-RPC error.
    Error { code: i64, message: String },
    /// `terminal/create` served as usual, the command's stdin an open pipe
    /// nobody writes.
    StdinOpen,
}

/// What a client reply kind does with a request.
pub(crate) trait ClientFault: Send + Sync {
    fn plan(&self) -> Plan;
}

/// Conditions of a rule: the method (required) and, optionally, which of
/// that method's requests (`call: 0`, `call: {from: 1}`); without `call`,
/// every one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<CallMatch>,
}

/// One client rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientRule {
    pub when: When,
    pub reply: ClientReply,
}

impl ClientRule {
    /// What is wrong with the rule (checked at load).
    pub fn check(&self) -> Result<(), String> {
        if !METHODS.contains(&self.when.method.as_str()) {
            return Err(format!(
                "unknown client method `{}`; a client rule answers one of {}",
                self.when.method,
                METHODS.join(", ")
            ));
        }
        if self.reply.as_dyn().plan() == Plan::StdinOpen && self.when.method != "terminal/create" {
            return Err(format!(
                "client reply kind `stdin_open` applies to terminal/create only, not `{}`",
                self.when.method
            ));
        }
        Ok(())
    }
}

/// The plan for request number `index` (from 0, among `method`'s), if a
/// rule matches: the first that does.
pub fn plan(rules: &[ClientRule], method: &str, index: u64) -> Option<Plan> {
    rules
        .iter()
        .find(|r| r.when.method == method && r.when.call.as_ref().is_none_or(|c| c.matches(index)))
        .map(|r| r.reply.as_dyn().plan())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_by_method_and_index_first_wins() {
        let rules: Vec<ClientRule> = serde_yaml::from_str(
            "- when: {method: session/request_permission, call: 0}\n  reply: {kind: never}\n\
             - when: {method: session/request_permission}\n  reply: {kind: late, delay: 2}\n\
             - when: {method: fs/read_text_file}\n  reply: {kind: rpc_error, code: -32603, message: boom}\n",
        )
        .unwrap();
        assert!(rules.iter().all(|r| r.check().is_ok()));
        let p = "session/request_permission";
        assert_eq!(plan(&rules, p, 0), Some(Plan::Held));
        assert_eq!(
            plan(&rules, p, 1),
            Some(Plan::After(Duration::from_secs(2)))
        );
        assert_eq!(
            plan(&rules, "fs/read_text_file", 5),
            Some(Plan::Error {
                code: -32603,
                message: "boom".into()
            })
        );
        assert_eq!(plan(&rules, "terminal/create", 0), None);
    }

    #[test]
    fn unknown_methods_and_kinds_are_refused() {
        let r: ClientRule =
            serde_yaml::from_str("{when: {method: fs/delete}, reply: {kind: never}}").unwrap();
        assert!(r.check().unwrap_err().contains("fs/read_text_file"));
        let e = serde_yaml::from_str::<ClientRule>(
            "{when: {method: fs/read_text_file}, reply: {kind: sulk}}",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("late, never, rpc_error, stdin_open"), "{e}");
        let r: ClientRule =
            serde_yaml::from_str("{when: {method: fs/read_text_file}, reply: {kind: stdin_open}}")
                .unwrap();
        assert!(r.check().unwrap_err().contains("terminal/create only"));
        let r: ClientRule =
            serde_yaml::from_str("{when: {method: terminal/create}, reply: {kind: stdin_open}}")
                .unwrap();
        assert!(r.check().is_ok());
    }
}
