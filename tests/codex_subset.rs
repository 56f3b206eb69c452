//! A bounded real-agent lane: fast seed scenarios against Codex CLI 0.169.0
//! through `examples/codex/codex.yaml` (exec mode), with the verdicts the
//! full-table runs recorded in examples/codex/README.md. Some pass; one fails
//! on real Codex behaviour:
//!
//! * `provider_retry_after_beyond_budget`: a 429 with `retry-after: 3600` is
//!   waited out, so the turn does not end within its 30 s.
//!
//! `provider_500_forever` passes since the profile maps the row's
//! `api_max_retries` onto `request_max_retries` and `stream_max_retries`
//! (9 calls = 3 × 3; with Codex's defaults, 4 and 5, it made 30 requests, past
//! the row's bound of 16: docs/profile-audit.md).
//!
//! `tool_background_swarm` (README: the `setsid` escapee outlives `codex exec`)
//! is no longer in the lane: `exec_command` has no `background` argument, so
//! the profile maps none and the row is N/A for Codex (a row's unmapped tool
//! argument is never sent silently).
//!
//! Ignored by a plain `cargo test` (it needs Codex installed);
//! `.ci/codex_subset.sh` installs it. Run by hand without Codex, it fails
//! saying what to install.

mod common;

use common::*;

const PASSING: &[&str] = &[
    "provider_400_forever",
    "provider_429_forever",
    "tool_args_garbage",
    "tool_name_unknown",
    "provider_500_forever",
    // MCP over stdio: the namespaced tool name reaches Codex's MCP router
    // (`mcp__chaos/probe`), and an interrupt sends notifications/cancelled.
    "mcp_error_result",
    "interrupt_mcp_call",
];

/// (scenario, the invariants it fails, a phrase of the violation)
const FAILING: &[(&str, &[&str], &str)] = &[(
    "provider_retry_after_beyond_budget",
    &["termination"],
    "did not return within its 30 s deadline",
)];

#[test]
#[ignore = "needs Codex CLI 0.169.0: .ci/codex_subset.sh"]
fn codex_subset_verdicts() {
    run_subset(&Subset {
        agent: "Codex CLI 0.169.0",
        installed: "examples/codex/prefix/bin/codex",
        install: ".ci/codex_subset.sh",
        profile: "examples/codex/codex.yaml",
        passing: PASSING,
        failing: FAILING,
        store_checks: &["store_tool_results"],
        store_rows: PASSING,
        seed: "11",
    });
}
