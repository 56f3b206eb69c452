//! The known agents: ONE line each. The folder is `examples/<name>/` (embedded
//! by `build.rs`; a folder missing at build time leaves the entry listed as
//! "not in this build"), then what `--agent` is given in it (the profile, or a
//! driver executable with its `NAME.yaml` beside it), the pinned version, and
//! where the folder's `setup.sh` puts the install (how `chaosrun agents` tells
//! whether the pinned version is there). Keep one `entry("` call per line:
//! `build.rs` reads the names from these lines.

use super::entry::{entry, Entry, Install::*};

/// Every agent `--agent NAME` resolves, in the order `chaosrun agents` lists them.
#[rustfmt::skip]
pub const AGENTS: &[Entry] = &[
    entry("reference", "agent.yaml", "bundled", Bundled),
    entry("claude-code", "claude-code.yaml", "2.1.328", Npm("@anthropic-ai/claude-code")),
    entry("codex", "codex.yaml", "0.169.0", Npm("@openai/codex")),
    entry("gemini-cli", "gemini-cli.yaml", "0.61.0", Npm("@google/gemini-cli")),
    entry("qwen-code", "qwen-code.yaml", "0.24.4", Npm("@qwen-code/qwen-code")),
    entry("hermes", "hermes", "0.19.0", Pip("hermes-agent")),
    entry("pydantic-ai", "pydantic-ai.yaml", "2.62.0", Pip("pydantic-ai-slim")),
    entry("aider", "aider.yaml", "0.86.2", Pip("aider-chat")),
    entry("pgworker", "pgworker", "3.2.*", Pip("psycopg")),
    entry("opencode", "opencode.yaml", "1.18.33", Npm("opencode-ai")),
    entry("kilo", "kilo.yaml", "7.7.7", Npm("@kilocode/cli")),
    entry("pi", "pi.yaml", "0.73.1", Npm("@mariozechner/pi-coding-agent")),
    entry("copilot", "copilot.yaml", "1.0.102", Npm("@github/copilot")),
    entry("continue", "continue.yaml", "1.5.47", Npm("@continuedev/cli")),
];
