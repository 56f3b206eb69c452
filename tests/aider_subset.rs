//! A bounded real-agent lane: three fast seed scenarios against aider 0.86.2
//! (PyPI `aider-chat`, in exec mode through `examples/aider/aider.yaml`:
//! `aider --message` once per turn, `tool_calls: false`), with the verdicts
//! the full-table run recorded in examples/aider/README.md. Two pass; one
//! fails on aider's own behaviour:
//!
//! * `provider_400_forever` passes: one call, the 400 surfaced (no retry in
//!   the openai SDK, litellm or aider), and the turn is judged failed by
//!   `exec.failed.unless_last_line` although aider exits 0.
//! * `provider_slow_trickle_is_not_stale` passes: a stream slower in total
//!   than aider's `--timeout` (the per-read httpx timeout) is read to its end.
//! * `provider_garbage_body_forever` fails on `outcome`: a 200 whose body is
//!   not JSON reaches aider as an empty reply, which it reports as
//!   "Empty response received from LLM" and then prints its usage line, as
//!   after any answer, so the turn reads as completed.
//!
//! Ignored by a plain `cargo test` (it needs aider installed);
//! scripts/test.sh installs it with `.ci/aider_subset.sh` and runs it.
//! Run by hand without it, it fails saying what to install.

mod common;

use common::*;

const PASSING: &[&str] = &["provider_400_forever", "provider_slow_trickle_is_not_stale"];

/// (scenario, the invariants it fails, a phrase of the violation)
const FAILING: &[(&str, &[&str], &str)] = &[(
    "provider_garbage_body_forever",
    &["termination"],
    "Empty response received from LLM",
)];

#[test]
#[ignore = "needs aider 0.86.2: .ci/aider_subset.sh (scripts/test.sh runs it)"]
fn aider_subset_verdicts() {
    run_subset(&Subset {
        agent: "aider 0.86.2",
        installed: "examples/aider/.venv/bin/aider",
        install: ".ci/aider_subset.sh",
        profile: "examples/aider/aider.yaml",
        passing: PASSING,
        failing: FAILING,
        store_checks: &[],
        store_rows: &[],
        seed: "11",
    });
}
