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

/// One short row over ACP (`examples/claude-code/claude-code-acp.yaml`,
/// through @zed-industries/claude-agent-acp 0.23.1): `provider_500_forever`
/// fails as in `examples/claude-code/acp-report.json`. The errored turn ends
/// (-32603), and the probe prompt in the same session is answered `end_turn`
/// at once, empty, before its own model call: the adapter returns on the
/// errored turn's leftover `session_state_changed: idle`
/// (dist/acp-agent.js:315-317; README "Over ACP").
#[test]
#[ignore = "needs Claude Code 2.1.328 and claude-agent-acp 0.23.1: .ci/claude_code_subset.sh"]
fn claude_code_acp_row_verdict() {
    run_subset(&Subset {
        agent: "Claude Code 2.1.328 over ACP",
        installed: "examples/claude-code/prefix/bin/claude-agent-acp",
        install: ".ci/claude_code_subset.sh",
        profile: "examples/claude-code/claude-code-acp.yaml",
        passing: &[],
        failing: &[(
            "provider_500_forever",
            &["reusability"],
            // answered end_turn and empty: the off-by-one, not a probe left hanging
            "(completed=true failed=false final=\"\")",
        )],
        store_checks: &[],
        store_rows: &[],
        seed: "11",
    });
}
