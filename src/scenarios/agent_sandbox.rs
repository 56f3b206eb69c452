//! The agent's own sandbox nested in the scenario's (issue 35.5; codex
//! #12867, #10702): a row's `agent_sandbox:` asks the agent to run its tools
//! inside its own sandbox (the profile renders `{{agent_sandbox}}`, `true`
//! on such a row and `false` on every other, into the agent's setting), and
//! says what the sandboxed command prints once it ran. With
//! `namespaces: denied` the process fault (`driver::seccomp`) makes
//! namespace creation fail for the agent's whole tree, as a container
//! runtime's default seccomp profile does, so a sandbox built on namespaces
//! cannot start. The check (the oracle's `agent_sandbox`) wants the tool
//! to have run or its result to name the sandbox's failure.

use serde::{Deserialize, Serialize};

/// A row's `agent_sandbox:` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSandbox {
    /// What the sandboxed tool prints when it ran (`{{nonce}}` rendered);
    /// written so that the command itself does not contain it.
    pub prints: String,
    /// Whether the agent's tree may create namespaces.
    #[serde(default)]
    pub namespaces: Namespaces,
}

/// Namespace creation for the agent's processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Namespaces {
    /// As the scenario's sandbox allows it (the default).
    #[default]
    Allowed,
    /// Refused for the agent and every descendant (the driver's
    /// seccomp program, `driver::seccomp`).
    Denied,
}

impl AgentSandbox {
    /// Whether the row denies namespace creation to the agent's tree.
    pub fn denies_namespaces(&self) -> bool {
        self.namespaces == Namespaces::Denied
    }
}

/// Words by which a tool result names a sandbox that could not start or
/// could not do what was asked (matched case-insensitively).
pub const NAMES_THE_SANDBOX: &[&str] = &[
    "sandbox",
    "namespace",
    "unshare",
    "nested",
    "nesting",
    "bwrap",
    "bubblewrap",
    "landlock",
    "seccomp",
    "container",
];

/// The first word of [`NAMES_THE_SANDBOX`] that `text` holds.
pub fn named_failure(text: &str) -> Option<&'static str> {
    let lower = text.to_lowercase();
    NAMES_THE_SANDBOX
        .iter()
        .copied()
        .find(|w| lower.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_naming_the_sandbox_is_recognised_in_any_case() {
        assert_eq!(
            named_failure("error: Sandbox could not start"),
            Some("sandbox")
        );
        assert_eq!(
            named_failure("unshare failed: Operation not permitted"),
            Some("unshare")
        );
        assert_eq!(named_failure("error: command failed (exit 1)"), None);
    }
}
