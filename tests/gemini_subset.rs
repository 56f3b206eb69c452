//! A bounded real-agent lane: seven fast seed scenarios against Gemini CLI
//! 0.61.0 in exec mode (`examples/gemini-cli/gemini-cli.yaml`), with the
//! verdicts the full-table runs recorded in examples/gemini-cli/README.md.
//! Five pass; two fail on real Gemini CLI behaviour:
//!
//! * `mcp_error_result` passes only if chaosrun's MCP server is registered:
//!   the profile's `mcp-exec.sh` merges it into the user settings, since
//!   Gemini CLI skips a system settings file under the temp dir (where the
//!   scenario's HOME lives) as insecure.
//!
//! * `tool_background_swarm`: a one-shot `gemini -p` exits after its turn and
//!   leaves its `is_background: true` job (and its eight children) running.
//! * `provider_400_forever`: a turn that fails rolls the prompt back out of
//!   the session file (`GeminiChat` rewrites `messages`), which then holds
//!   nothing resumable, so `gemini --resume UUID` refuses the probe with "No
//!   previous sessions found for this project." without calling the model.
//!
//! Ignored by a plain `cargo test` (it needs Gemini CLI installed);
//! scripts/test.sh installs it with `.ci/gemini_subset.sh` and runs it. Run by
//! hand without it, it fails saying what to install.

mod common;

use common::*;

const PASSING: &[&str] = &[
    "tool_args_garbage",
    "tool_name_unknown",
    "parallel_8_terminal_calls",
    "interrupt_endless_tool_loop",
    "mcp_error_result",
];

/// (scenario, the invariants it fails, a phrase of the violation)
const FAILING: &[(&str, &[&str], &str)] = &[
    ("tool_background_swarm", &["process_hygiene"], "sleep 3600"),
    (
        "provider_400_forever",
        &["reusability"],
        "without calling the provider",
    ),
];

#[test]
#[ignore = "needs Gemini CLI 0.61.0: .ci/gemini_subset.sh (scripts/test.sh runs it)"]
fn gemini_subset_verdicts() {
    run_subset(&Subset {
        agent: "Gemini CLI 0.61.0",
        installed: "examples/gemini-cli/prefix/bin/gemini",
        install: ".ci/gemini_subset.sh",
        profile: "examples/gemini-cli/gemini-cli.yaml",
        passing: PASSING,
        failing: FAILING,
        store_checks: &[],
        store_rows: &[],
        seed: "11",
    });
}

/// One row over ACP (`gemini-cli-acp.yaml`, the same install):
/// `interrupt_provider_hang` fails because a `session/cancel` during the
/// model call rolls the cancelled prompt out of the history
/// (`chunk-JDPZ4CE3.js:332150-332160`, README "Over ACP"), so the probe is
/// sent without it. The verdict must match the committed ACP report.
#[test]
#[ignore = "needs Gemini CLI 0.61.0: .ci/gemini_subset.sh (scripts/test.sh runs it)"]
fn gemini_acp_subset_verdicts() {
    let row = "interrupt_provider_hang";
    let committed = read_json(&repo().join("examples/gemini-cli/acp-report.json"));
    assert_eq!(
        scenario(&committed, row)["verdict"],
        "fail",
        "the committed ACP report's verdict for {row}"
    );
    run_subset(&Subset {
        agent: "Gemini CLI 0.61.0",
        installed: "examples/gemini-cli/prefix/bin/gemini",
        install: ".ci/gemini_subset.sh",
        profile: "examples/gemini-cli/gemini-cli-acp.yaml",
        passing: &[],
        failing: &[(row, &["reusability"], "the agent lost its history")],
        store_checks: &[],
        store_rows: &[],
        seed: "11",
    });
}
