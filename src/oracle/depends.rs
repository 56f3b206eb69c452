//! One cause, one failed check: which checks judge evidence that another
//! check's failure already explains ([`UPSTREAM`]), and the pass over a row's
//! checks that makes such a downstream failure `not checked (because
//! <upstream> failed: …)` ([`attribute`]), naming the root failure. The
//! upstream check still fails, so the row still fails: only the repeated
//! charge for the same cause goes.

use super::{clip, Check, Status};

/// Each downstream check (`invariant/name`) with the checks whose failure
/// makes its own failure the same cause, in the order they are tried.
///
/// - A kill that never fired (`process_fault_landed`) is also why it did not
///   land mid-turn; a kill that did not land (or an agent that did not come
///   back) is why the probe never ran: chaosrun stopped the agent at the
///   faulted turn's deadline, the agent did not exit by itself.
/// - A fault that never landed (its rule never served a call, its interrupt
///   never sent, its hung tool never ran, its window never overflowed, its
///   credential never expired, its MCP call never arrived, no client rule
///   answered a request) is why the
///   faulted turn did not end the way the fault should have made it end,
///   and an interrupt waiting on a rule that never served was never sent.
/// - An agent that never booted (`boots`) is why no responder rule served a
///   call (an endpoint it waited on at start-up, for ever).
/// - A tool result missing from the wire is why no result sent contains the
///   expected text.
/// - A turn that never ended after chaosrun settled its pending permission
///   request (`pending_request_settled`) is why the faulted turn did not
///   end, did not end as expected, and why the probe behind it failed.
/// - A frame of the ACP update stream that could not be read (`protocol`:
///   over the frame cap, not JSON-RPC) may have carried the status that
///   settled a tool call or the `tool_call` that reported it: the stream's
///   two tool-call checks cannot be judged on what was left (codex-acp's
///   30.8 MB `tool_huge_output` frame failed both).
/// - A queued prompt never answered (`queued_prompt_answered`) is why the
///   probe (that prompt) failed: not run, or (`probe_answered`) answered
///   without its own answer (a prompt kept across a kill and swallowed).
/// - A side effect that happened twice is why a finished call's side effect
///   is in the journal twice.
/// - A restarted agent that refused to resume a damaged store
///   (`resumes_after_kill`: its `session/load` failed on the damaged
///   transcript) is why it resumed with nothing and never answered after
///   the damage (`store_resumed_past_damage`).
pub const UPSTREAM: &[(&str, &[&str])] = &[
    (
        "store_integrity/store_resumed_past_damage",
        &["termination/resumes_after_kill"],
    ),
    (
        "termination/kill_landed_mid_turn",
        &["exercised/process_fault_landed"],
    ),
    (
        "reusability/probe",
        &[
            "exercised/process_fault_landed",
            "termination/kill_landed_mid_turn",
            "termination/resumes_after_kill",
            "termination/pending_request_settled",
            "reusability/queued_prompt_answered",
        ],
    ),
    (
        "reusability/probe_answered",
        &["reusability/queued_prompt_answered"],
    ),
    ("exercised/fault_served", &["termination/boots"]),
    ("exercised/interrupt_landed", &["exercised/fault_served"]),
    (
        "termination/faulted_turn_ends",
        &["termination/pending_request_settled"],
    ),
    (
        "termination/outcome",
        &[
            "exercised/fault_served",
            "exercised/interrupt_landed",
            "exercised/tool_ran",
            "exercised/context_overflowed",
            "exercised/credential_expired",
            "exercised/mcp_call_arrived",
            "exercised/client_fault_served",
            "termination/pending_request_settled",
        ],
    ),
    (
        "history_integrity/tool_result_contains",
        &[
            "history_integrity/wire_tool_results",
            "exercised/client_fault_served",
        ],
    ),
    (
        "process_hygiene/tool_calls_settled",
        &["termination/protocol"],
    ),
    (
        "process_hygiene/tool_calls_reported",
        &["termination/protocol"],
    ),
    (
        "side_effects/finished_calls_journalled_once",
        &["side_effects/no_side_effect_twice"],
    ),
];

/// A check's key in [`UPSTREAM`]: `invariant/name`.
pub fn key(c: &Check) -> String {
    format!("{}/{}", c.invariant.key(), c.name)
}

/// The failed check at the root of `k`'s failure, if one of its upstream
/// checks (or theirs) failed: its key and first violation.
fn root<'a>(k: &str, failed: &'a [(String, String)], depth: usize) -> Option<&'a (String, String)> {
    let (_, ups) = UPSTREAM.iter().find(|(d, _)| *d == k)?;
    let hit = ups
        .iter()
        .find_map(|u| failed.iter().find(|(f, _)| f == u))?;
    match depth {
        0 => Some(hit),
        _ => root(&hit.0, failed, depth - 1).or(Some(hit)),
    }
}

/// `checks` with every failed downstream check whose upstream failed made
/// `not checked`, naming the root failure.
pub fn attribute(checks: Vec<Check>) -> Vec<Check> {
    let failed: Vec<(String, String)> = checks
        .iter()
        .filter(|c| c.failed())
        .map(|c| (key(c), c.violations().first().cloned().unwrap_or_default()))
        .collect();
    checks
        .into_iter()
        .map(|c| {
            let k = key(&c);
            match root(&k, &failed, UPSTREAM.len()) {
                Some((up, why)) if c.failed() => Check {
                    status: Status::NotChecked {
                        reason: format!("because {up} failed: {}", clip(why, 200)),
                    },
                    ..c
                },
                _ => c,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::Invariant;
    use super::*;

    fn fail(inv: Invariant, name: &'static str, why: &str) -> Check {
        Check::new(inv, name, vec![why.into()])
    }

    /// A chain (fault never served → interrupt never sent → outcome) names
    /// its root; the root still fails; a downstream check that passed stays
    /// a pass; a failed check with no failed upstream stays failed.
    #[test]
    fn a_downstream_failure_names_its_root_and_the_root_still_fails() {
        let checks = vec![
            fail(Invariant::Termination, "outcome", "trigger never fired"),
            Check::new(Invariant::Termination, "faulted_turn_ends", vec![]),
            fail(
                Invariant::Exercised,
                "fault_served",
                "rule 1 (hang) never answered",
            ),
            fail(Invariant::Exercised, "interrupt_landed", "never sent"),
            fail(Invariant::ProcessHygiene, "no_survivors", "a job survived"),
        ];
        let out = attribute(checks);
        let by = |n: &str| out.iter().find(|c| c.name == n).unwrap();
        assert_eq!(
            by("outcome").not_checked_reason(),
            Some("because exercised/fault_served failed: rule 1 (hang) never answered")
        );
        assert_eq!(
            by("interrupt_landed").not_checked_reason(),
            Some("because exercised/fault_served failed: rule 1 (hang) never answered")
        );
        assert!(by("fault_served").failed());
        assert!(by("no_survivors").failed());
        assert_eq!(by("faulted_turn_ends").status, Status::Pass);
    }

    /// An unreadable ACP frame (codex-acp's 30.8 MB one) fails `protocol`;
    /// the tool call it settled is then not charged again.
    #[test]
    fn a_dropped_acp_frame_is_why_a_call_looks_unsettled() {
        let checks = vec![
            fail(
                Invariant::Termination,
                "protocol",
                "bad ACP frame from the agent: over 4 MiB",
            ),
            fail(
                Invariant::ProcessHygiene,
                "tool_calls_settled",
                "call_1 left in_progress",
            ),
            fail(
                Invariant::ProcessHygiene,
                "tool_calls_reported",
                "0 of 1 reported",
            ),
        ];
        let out = attribute(checks);
        let by = |n: &str| out.iter().find(|c| c.name == n).unwrap();
        assert!(by("protocol").failed());
        for n in ["tool_calls_settled", "tool_calls_reported"] {
            assert_eq!(
                by(n).not_checked_reason(),
                Some(
                    "because termination/protocol failed: bad ACP frame from the agent: over 4 MiB"
                ),
                "{n}"
            );
        }
    }

    /// The graph has no cycle and names only keys of known invariants.
    #[test]
    fn the_graph_is_acyclic() {
        fn reaches(from: &str, to: &str, depth: usize) -> bool {
            depth > 0
                && UPSTREAM
                    .iter()
                    .filter(|(d, _)| *d == from)
                    .flat_map(|(_, ups)| ups.iter())
                    .any(|u| *u == to || reaches(u, to, depth - 1))
        }
        const KEYS: &[&str] = &[
            "termination",
            "provider_calls",
            "reusability",
            "history_integrity",
            "process_hygiene",
            "store_integrity",
            "side_effects",
            "exercised",
            "memory",
            "agent_sandbox",
            "disk",
        ];
        for (d, ups) in UPSTREAM {
            assert!(!reaches(d, d, UPSTREAM.len() + 1), "{d} depends on itself");
            for k in ups.iter().chain([d]) {
                let inv = k.split('/').next().unwrap();
                assert!(KEYS.contains(&inv), "{k}: no invariant `{inv}`");
            }
        }
    }

    /// Every invariant's key is the name its reports give it.
    #[test]
    fn keys_are_the_reported_names() {
        for inv in [
            Invariant::Termination,
            Invariant::ProviderCalls,
            Invariant::Reusability,
            Invariant::HistoryIntegrity,
            Invariant::ProcessHygiene,
            Invariant::StoreIntegrity,
            Invariant::SideEffects,
            Invariant::Exercised,
            Invariant::Memory,
            Invariant::AgentSandbox,
            Invariant::Disk,
        ] {
            assert_eq!(serde_json::to_value(inv).unwrap(), inv.key());
        }
    }
}
