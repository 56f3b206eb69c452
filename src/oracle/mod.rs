//! The oracle: each invariant class of the design (and exactly-once side
//! effects, for process faults) is a pure function from a
//! scenario, the adapter's capabilities and an [`Observation`] to checks. A
//! check that could not be made is `NotChecked` with its reason, never a pass.

mod acp_pending;
mod acp_queued;
mod acp_quiet;
mod acp_released;
mod acp_reload;
mod acp_reported;
mod acp_settled;
pub mod applies;
mod backoff;
mod broken_args;
mod calls;
pub mod cause;
mod client_served;
mod credential;
pub mod depends;
mod discovery;
mod disk;
mod endpoint;
mod exercised;
pub mod files_written;
mod giveup;
mod hangup;
mod history;
mod hygiene;
mod length_cut;
mod mcp;
mod mcp_abandoned;
mod mcp_restart;
pub mod memory;
mod memory_growth;
mod memory_per_turn;
mod orphan;
mod overflow;
mod overflow_hint;
mod request_loop;
mod result_ids;
mod reuse;
pub(crate) mod sandbox;
pub mod schedule;
mod side_effects;
mod stderr_note;
mod store;
mod store_damage;
mod store_kill;
mod termination;
mod verdict;
mod zombies;

#[cfg(test)]
pub(crate) mod fixtures;

use serde::{Deserialize, Serialize};

use crate::observe::{Capabilities, Observation};
use crate::scenarios::Scenario;

/// The invariant classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Invariant {
    Termination,
    ProviderCalls,
    Reusability,
    HistoryIntegrity,
    ProcessHygiene,
    StoreIntegrity,
    /// Added with process faults: side effects land exactly once.
    SideEffects,
    /// The fault landed (evidence it did), or the scenario proves nothing.
    Exercised,
    /// The agent's processes' peak memory within the row's bound.
    Memory,
    /// The agent's own sandbox, nested in the scenario's: its tool ran or
    /// its failure was named.
    AgentSandbox,
    /// The bytes the agent's run added to its disk within the row's bound.
    Disk,
}

impl Invariant {
    pub fn label(self) -> &'static str {
        match self {
            Invariant::Termination => "bounded termination",
            Invariant::ProviderCalls => "bounded provider calls",
            Invariant::Reusability => "reusability",
            Invariant::HistoryIntegrity => "history integrity",
            Invariant::ProcessHygiene => "process hygiene",
            Invariant::StoreIntegrity => "store integrity",
            Invariant::SideEffects => "exactly-once side effects",
            Invariant::Exercised => "fault exercised",
            Invariant::Memory => "bounded memory",
            Invariant::AgentSandbox => "agent sandbox",
            Invariant::Disk => "bounded disk",
        }
    }

    /// The name a report gives it (`history_integrity`).
    pub fn key(self) -> &'static str {
        match self {
            Invariant::Termination => "termination",
            Invariant::ProviderCalls => "provider_calls",
            Invariant::Reusability => "reusability",
            Invariant::HistoryIntegrity => "history_integrity",
            Invariant::ProcessHygiene => "process_hygiene",
            Invariant::StoreIntegrity => "store_integrity",
            Invariant::SideEffects => "side_effects",
            Invariant::Exercised => "exercised",
            Invariant::Memory => "memory",
            Invariant::AgentSandbox => "agent_sandbox",
            Invariant::Disk => "disk",
        }
    }
}

/// The outcome of one check. Deserialized (by `merge`) with exactly these
/// names: any other status is refused, never read as a pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail { violations: Vec<String> },
    NotChecked { reason: String },
}

/// One named check within an invariant class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub invariant: Invariant,
    pub name: &'static str,
    #[serde(flatten)]
    pub status: Status,
}

impl Check {
    pub(crate) fn new(invariant: Invariant, name: &'static str, violations: Vec<String>) -> Check {
        let status = if violations.is_empty() {
            Status::Pass
        } else {
            Status::Fail { violations }
        };
        Check {
            invariant,
            name,
            status,
        }
    }

    pub(crate) fn skipped(
        invariant: Invariant,
        name: &'static str,
        reason: impl Into<String>,
    ) -> Check {
        Check {
            invariant,
            name,
            status: Status::NotChecked {
                reason: reason.into(),
            },
        }
    }

    pub fn failed(&self) -> bool {
        matches!(self.status, Status::Fail { .. })
    }

    pub fn not_checked_reason(&self) -> Option<&str> {
        match &self.status {
            Status::NotChecked { reason } => Some(reason),
            _ => None,
        }
    }

    pub fn not_checked(&self) -> bool {
        self.not_checked_reason().is_some()
    }

    pub fn violations(&self) -> &[String] {
        match &self.status {
            Status::Fail { violations } => violations,
            _ => &[],
        }
    }
}

/// Every check of every invariant class, in class order; a failure another
/// failed check already explains is `not checked`, naming it
/// ([`depends::attribute`]).
pub fn check(s: &Scenario, caps: Capabilities, obs: &Observation) -> Vec<Check> {
    if let Some(err) = &obs.setup_error {
        let mut out = vec![Check::new(
            Invariant::Termination,
            "agent_started",
            vec![format!("the scenario could not be run: {err}")],
        )];
        for (inv, name) in [
            (Invariant::ProviderCalls, "call_bound"),
            (Invariant::Reusability, "probe"),
            (Invariant::HistoryIntegrity, "history"),
            (Invariant::ProcessHygiene, "hygiene"),
            (Invariant::StoreIntegrity, "integrity_check"),
            (Invariant::Exercised, "fault_landed"),
        ] {
            out.push(Check::skipped(inv, name, "the agent never ran"));
        }
        return out;
    }
    let mut out = termination::check(s, obs);
    out.extend(discovery::check(s, obs));
    out.extend(giveup::check(s, obs));
    out.extend(mcp::cancellation(s, obs));
    out.extend(mcp_abandoned::check(s, caps.mcp_tool.as_deref(), obs));
    out.extend(calls::check(s, obs));
    out.extend(backoff::check(s, obs));
    out.extend(request_loop::check(s, caps.renders_retries, obs));
    out.extend(credential::check(s, obs));
    out.extend(calls::subagent(s, obs));
    out.extend(orphan::check(s, obs));
    out.extend(mcp::calls(s, obs));
    out.extend(mcp::unauthorized_retries(s, obs));
    out.extend(mcp::offered(s, caps.mcp_tool.as_deref(), obs));
    out.extend(mcp::schema_relisted(s, caps.mcp_tool.as_deref(), obs));
    out.extend(mcp_restart::check(s, caps.mcp_tool.as_deref(), obs));
    out.extend(reuse::check(s, caps.clone(), obs));
    out.extend(history::check(s, obs));
    out.extend(result_ids::check(s, obs));
    out.extend(length_cut::check(s, obs));
    out.extend(hygiene::check(s, obs));
    out.push(zombies::check(obs));
    out.extend(acp_settled::check(obs));
    out.extend(acp_quiet::check(obs));
    out.extend(acp_reported::check(s, obs));
    out.extend(acp_pending::check(s, obs));
    out.extend(acp_reload::check(obs));
    out.extend(acp_queued::check(s, obs));
    out.extend(acp_released::check(s, obs));
    out.extend(store::check(obs));
    out.extend(store_kill::check(obs));
    out.extend(store_damage::check(obs));
    out.extend(hangup::check(obs));
    out.extend(side_effects::check(s, obs));
    out.extend(broken_args::check(obs));
    out.extend(files_written::check(s, obs));
    out.extend(sandbox::check(s, obs));
    out.extend(exercised::check_with(s, obs, caps.background.as_ref()));
    out.extend(schedule::check(s, obs));
    let growth = memory_growth::check(s, obs);
    let bounded = memory::check(s, obs);
    out.push(memory_growth::one_cause(bounded, growth.as_ref(), s, obs));
    out.extend(growth);
    out.extend(memory_per_turn::check(s, obs));
    out.extend(disk::check(s, obs));
    depends::attribute(out)
}

pub use backoff::{violations as backoff_violations, EPISODE_FLOOR, RETRY_AFTER_TOLERANCE};
pub use cause::{ErrorCause, HostNeed, NotApplicable};
pub use store::configuration_error;
pub use termination::OOM_NOTICE_LAG;
pub use verdict::{judge, Judged, Verdict};

/// A check made on partial data (a cap cut what chaosrun kept): its
/// violations stand, but a pass would claim more than was seen, so it is
/// `not checked` with `why` instead.
pub(crate) fn unless_partial(check: Check, why: Option<String>) -> Check {
    match why {
        Some(reason) if check.status == Status::Pass => {
            Check::skipped(check.invariant, check.name, reason)
        }
        _ => check,
    }
}

/// `{{nonce}}` in scenario text, rendered for this run.
pub(crate) fn with_nonce(text: &str, obs: &Observation) -> String {
    text.replace("{{nonce}}", &obs.nonce)
}

pub(crate) use crate::units::clip;
