//! A bounded real-agent lane: five fast seed scenarios against Hermes Agent
//! 0.19.0 through `examples/hermes/hermes`, with the verdicts the full-table
//! runs recorded in examples/hermes/README.md. Four pass; one fails on a real
//! Hermes bug:
//!
//! * `provider_silent_after_headers_then_recover` passes since chaosrun sets
//!   `NO_PROXY` for loopback: httpx then routes the provider through its
//!   default transport, where Hermes' stale-stream kill finds the socket (its
//!   bug 2 shows only without `NO_PROXY`; see examples/hermes/README.md).
//! * `tool_background_swarm`: `AIAgent.close()` kills background jobs of
//!   task `session_id`, but the terminal tool registers them under
//!   `"default"`, so the swarm outlives the agent. chaosrun reports the
//!   survivors and then sweeps them itself.
//!
//! Ignored by a plain `cargo test` (it needs Hermes installed); scripts/test.sh
//! installs Hermes with `.ci/hermes_subset.sh` and runs it. Run by hand without
//! Hermes, it fails saying what to install.

mod common;

use common::*;

const PASSING: &[&str] = &[
    "provider_400_forever",
    "tool_args_truncated_json",
    "interrupt_hung_tool",
    "provider_silent_after_headers_then_recover",
];

/// (scenario, the invariants it fails, a phrase of the violation)
const FAILING: &[(&str, &[&str], &str)] =
    &[("tool_background_swarm", &["process_hygiene"], "sleep 3600")];

#[test]
#[ignore = "needs Hermes Agent 0.19.0: .ci/hermes_subset.sh (scripts/test.sh runs it)"]
fn hermes_subset_verdicts() {
    run_subset(&Subset {
        agent: "Hermes Agent 0.19.0",
        installed: "examples/hermes/.venv/bin/python",
        install: ".ci/hermes_subset.sh",
        profile: "examples/hermes/hermes",
        passing: PASSING,
        failing: FAILING,
        store_checks: &[],
        store_rows: &[],
        seed: "11",
    });
}
