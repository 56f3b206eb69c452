//! A bounded real-agent lane: five fast seed scenarios against a one-shot CLI
//! agent built on pydantic-ai 2.62.0 (`examples/pydantic-ai/agent.py`, in
//! exec mode through `examples/pydantic-ai/pydantic-ai.yaml`), with the
//! verdicts the full-table runs recorded in examples/pydantic-ai/README.md.
//! Four pass; one fails on what a one-shot agent cannot do:
//!
//! * `parallel_8_terminal_calls` passes with its store checks MADE on the
//!   agent's real JSONL transcript (pydantic-ai's own serialized messages),
//!   not "not checked".
//! * `tool_background_swarm`: the agent's process ends with its turn and
//!   nothing in pydantic-ai owns the `background: true` job it started, so
//!   the swarm outlives it. chaosrun reports the survivors, then sweeps them.
//!
//! Ignored by a plain `cargo test` (it needs pydantic-ai installed);
//! scripts/test.sh installs it with `.ci/pydantic_ai_subset.sh` and runs it.
//! Run by hand without it, it fails saying what to install.

mod common;

use common::*;

const PASSING: &[&str] = &[
    "provider_400_forever",
    "tool_args_truncated_json",
    "interrupt_hung_tool",
    "parallel_8_terminal_calls",
];

/// (scenario, the invariants it fails, a phrase of the violation)
const FAILING: &[(&str, &[&str], &str)] =
    &[("tool_background_swarm", &["process_hygiene"], "sleep 3600")];

#[test]
#[ignore = "needs pydantic-ai 2.62.0: .ci/pydantic_ai_subset.sh (scripts/test.sh runs it)"]
fn pydantic_ai_subset_verdicts() {
    run_subset(&Subset {
        agent: "pydantic-ai 2.62.0",
        installed: "examples/pydantic-ai/.venv/bin/python",
        install: ".ci/pydantic_ai_subset.sh",
        profile: "examples/pydantic-ai/pydantic-ai.yaml",
        passing: PASSING,
        failing: FAILING,
        store_checks: &["store_tool_results", "store_no_duplicate_user_turn"],
        store_rows: &["parallel_8_terminal_calls"],
        seed: "7",
    });
}
