//! The typed causes of the two verdicts the checks do not make: why a row
//! is N/A ([`NotApplicable`]: the profile or the host lacks what it needs)
//! and why it is an ERROR ([`ErrorCause`]: chaosrun could not run it). Only
//! the oracle makes them. A saved report holds each as its text (the text
//! the variant displays, unchanged from before the causes were typed); it
//! is read back into its variant here, the one place that knows the texts
//! ([`ErrorCause::from`]), so no reader sniffs a cause's words.

use serde::{Deserialize, Serialize};

/// Something a row needs from the host, which only the runner can look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostNeed {
    /// A memory cgroup controller (v2 in the scenario cgroups' hierarchy,
    /// else v1), to set an OOM row's limit.
    MemoryController,
}

const OOM_HOST: &str = "this row has the kernel OOM-kill the agent under a memory cgroup limit: ";
const OOM_HOST_FIX: &str = "; run chaosrun as root on a host with the cgroup v2 memory controller delegated, or the v1 memory controller mounted";

/// Why a row does not apply (N/A, not run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum NotApplicable {
    /// The profile lacks a capability the row needs (the reason names which,
    /// with a hint: [`crate::profile::needs`]).
    Profile(String),
    /// The host lacks `HostNeed` (why).
    Host(HostNeed, String),
}

impl Default for NotApplicable {
    fn default() -> Self {
        NotApplicable::Profile(String::new())
    }
}

impl std::fmt::Display for NotApplicable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotApplicable::Profile(reason) => f.write_str(reason),
            NotApplicable::Host(HostNeed::MemoryController, why) => {
                write!(f, "{OOM_HOST}{why}{OOM_HOST_FIX}")
            }
        }
    }
}

impl From<String> for NotApplicable {
    fn from(text: String) -> Self {
        let host = text
            .strip_prefix(OOM_HOST)
            .and_then(|t| t.strip_suffix(OOM_HOST_FIX));
        match host {
            Some(why) => NotApplicable::Host(HostNeed::MemoryController, why.to_string()),
            None => NotApplicable::Profile(text),
        }
    }
}

impl From<NotApplicable> for String {
    fn from(n: NotApplicable) -> String {
        n.to_string()
    }
}

/// Why chaosrun could not run a row (ERROR): counts as not passed, never
/// as the agent's failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ErrorCause {
    /// The run could not be set up (provider, home, spawning the agent): the
    /// agent never ran.
    SetupFailed(String),
    /// Something chaosrun could not do after the agent ran (a drive past its
    /// bound, a cassette it could not write, a failed MCP upstream).
    AfterRun(String),
    /// A replayed cassette had no entry for a call.
    Cassette(String),
    /// Proxy mode: the upstream failed on its own.
    Upstream(String),
    /// The profile's store mapping could not read a healthy store (its
    /// query, its Postgres DSN, its JSONL rules): the store step's to name.
    Store(String),
    /// Exec mode: a value the profile captures was never printed.
    Capture(String),
    /// A profile mistake the run shows (an unmapped `tools.mcp_probe`).
    ProfileMistake(String),
    /// chaosrun itself failed (a panic) while running the row.
    Crashed(String),
    /// A recorded pass or fail with no check at all (`merge`).
    NoCheck,
    /// A recorded error with no cause (`merge`).
    Unrecorded,
    /// A saved cause in words this chaosrun does not make (an older or
    /// hand-edited report), kept as it is.
    Saved(String),
}

/// A variant made from its detail.
type Make = fn(String) -> ErrorCause;

/// Each variant's words before its detail, in the order they are tried.
const PREFIXES: &[(&str, Make)] = &[
    ("the scenario could not be run: ", ErrorCause::SetupFailed),
    (
        "chaosrun could not finish the scenario after the agent ran: ",
        ErrorCause::AfterRun,
    ),
    (
        "the recorded session could not serve the scenario: ",
        ErrorCause::Cassette,
    ),
    (
        "the upstream could not serve the scenario: ",
        ErrorCause::Upstream,
    ),
    ("chaosrun failed while running it: ", ErrorCause::Crashed),
];

const NO_CHECK: &str = "the report holds no check for it";
const UNRECORDED: &str = "(no cause recorded)";

/// The store mapping's own words ([`super::store::configuration_error`]).
pub(crate) const STORE: [&str; 3] = [
    "the adapter profile's store query failed on ",
    "the adapter profile's Postgres store (",
    "the adapter profile's JSONL mapping read ",
];

/// A missing capture's words ([`super::store::configuration_error`]).
pub(crate) const CAPTURE_FIX: &str = "`, but the agent's output never matched `exec.capture.";

pub(crate) const PROFILE_MISTAKE: &str = "profile mistake: ";

impl std::fmt::Display for ErrorCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (prefix, detail) = match self {
            ErrorCause::SetupFailed(d) => (PREFIXES[0].0, d),
            ErrorCause::AfterRun(d) => (PREFIXES[1].0, d),
            ErrorCause::Cassette(d) => (PREFIXES[2].0, d),
            ErrorCause::Upstream(d) => (PREFIXES[3].0, d),
            ErrorCause::Crashed(d) => (PREFIXES[4].0, d),
            ErrorCause::Store(d)
            | ErrorCause::Capture(d)
            | ErrorCause::ProfileMistake(d)
            | ErrorCause::Saved(d) => ("", d),
            ErrorCause::NoCheck => return f.write_str(NO_CHECK),
            ErrorCause::Unrecorded => return f.write_str(UNRECORDED),
        };
        write!(f, "{prefix}{detail}")
    }
}

impl From<String> for ErrorCause {
    /// A saved cause's text back into its variant.
    fn from(text: String) -> Self {
        if let Some(v) = PREFIXES
            .iter()
            .find_map(|(p, v)| text.strip_prefix(p).map(|d| v(d.to_string())))
        {
            return v;
        }
        match text.as_str() {
            NO_CHECK => ErrorCause::NoCheck,
            UNRECORDED => ErrorCause::Unrecorded,
            t if STORE.iter().any(|p| t.starts_with(p)) => ErrorCause::Store(text),
            t if t.starts_with("turn ") && t.contains(CAPTURE_FIX) => ErrorCause::Capture(text),
            t if t.starts_with(PROFILE_MISTAKE) => ErrorCause::ProfileMistake(text),
            _ => ErrorCause::Saved(text),
        }
    }
}

impl From<ErrorCause> for String {
    fn from(c: ErrorCause) -> String {
        c.to_string()
    }
}

impl Default for ErrorCause {
    fn default() -> Self {
        ErrorCause::Saved(String::new())
    }
}

impl ErrorCause {
    /// Whether nothing at all was recorded for it.
    pub fn is_empty(&self) -> bool {
        matches!(self, ErrorCause::Saved(s) if s.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant reads back from its saved text as itself.
    #[test]
    fn every_cause_reads_back_from_its_saved_text() {
        let store = format!(
            "{}x.db: no such table; fix `store.messages_sql` (…)",
            STORE[0]
        );
        let capture = "turn 1 needs `{{captured.sid}}`, but the agent's output never matched `exec.capture.sid`; fix it".to_string();
        for c in [
            ErrorCause::SetupFailed("spawn failed".into()),
            ErrorCause::AfterRun("cannot write cassettes/s.jsonl".into()),
            ErrorCause::Cassette("cassette c.jsonl: no entry for main call 2".into()),
            ErrorCause::Upstream("connection refused".into()),
            ErrorCause::Store(store),
            ErrorCause::Capture(capture),
            ErrorCause::ProfileMistake(format!("{PROFILE_MISTAKE}map `tools.mcp_probe`")),
            ErrorCause::Crashed("panic: boom".into()),
            ErrorCause::NoCheck,
            ErrorCause::Unrecorded,
            ErrorCause::Saved("something an older chaosrun said".into()),
        ] {
            assert_eq!(ErrorCause::from(c.to_string()), c, "{c}");
            let json = serde_json::to_value(&c).unwrap();
            assert_eq!(json, serde_json::Value::String(c.to_string()));
        }
        for n in [
            NotApplicable::Profile("the profile maps no `tools.shell`".into()),
            NotApplicable::Host(HostNeed::MemoryController, "no memory controller".into()),
        ] {
            assert_eq!(NotApplicable::from(n.to_string()), n, "{n}");
        }
    }
}
