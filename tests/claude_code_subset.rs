//! A bounded real-agent lane: six fast seed scenarios against Claude Code
//! 2.1.328 in exec mode (`examples/claude-code/claude-code.yaml`), with the
//! verdicts the full-table runs recorded in examples/claude-code/README.md.
//! Five pass (each also makes the JSONL store checks on Claude Code's own
//! transcript; `tool_loop_hits_turn_budget` proves the profile's
//! `--max-turns` and its `errors.0` final); one fails on a real Claude Code
//! behaviour:
//!
//! * `provider_400_forever`: a permanent 400 is sent again with experimental
//!   `anthropic-beta` headers dropped one by one and with tool search off
//!   (6 calls where the bound is 2; see the README's diagnosis).
//!
//! Ignored by a plain `cargo test` (it needs Claude Code installed);
//! `.ci/claude_code_subset.sh` installs it. Run by hand without it, it fails
//! saying what to install.

mod common;

use common::*;

const PASSING: &[&str] = &[
    "tool_args_garbage",
    "provider_500_forever",
    "tool_name_unknown",
    "parallel_8_terminal_calls",
    "tool_loop_hits_turn_budget",
];

/// (scenario, the invariants it fails, a phrase of the violation)
const FAILING: &[(&str, &[&str], &str)] = &[(
    "provider_400_forever",
    &["provider_calls"],
    "provider calls; the bound is 2",
)];

#[test]
#[ignore = "needs Claude Code 2.1.328: .ci/claude_code_subset.sh"]
fn claude_code_subset_verdicts() {
    run_subset(&Subset {
        agent: "Claude Code 2.1.328",
        installed: "examples/claude-code/prefix/bin/claude",
        install: ".ci/claude_code_subset.sh",
        profile: "examples/claude-code/claude-code.yaml",
        passing: PASSING,
        failing: FAILING,
        store_checks: &["store_tool_results", "store_no_duplicate_user_turn"],
        store_rows: PASSING,
        seed: "11",
    });
}
