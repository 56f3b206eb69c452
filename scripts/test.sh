#!/usr/bin/env bash
# The project's test command (README "Run the tests"; .ci/run calls it).
# Installs what the tests need, then runs formatting, lint and every test.
#
# Tests that need something installed (Hermes, PostgreSQL, Chromium, ...) are
# `#[ignore = "needs ..."]` in a plain `cargo test`; this script installs their
# prerequisites and runs them with `--include-ignored`. When an install fails:
# under CI (the `CI` variable set) the whole run fails; locally the script says
# which tests it did not run and why, and leaves them out by name.
set -euo pipefail
cd "$(dirname "$0")/.."

not_run=()       # human-readable lines for the summary
skip_args=()     # `--skip NAME` for cargo test

missing() { # missing TEST_NAME "reason"
    if [ -n "${CI:-}" ]; then
        echo "FAIL: $2 (under CI every prerequisite must install)" >&2
        exit 1
    fi
    echo "NOT RUN: $1: $2"
    not_run+=("$1: $2")
    skip_args+=(--skip "$1")
}

echo "== toolchain"
cargo --version
python3 --version

echo "== real agent: Hermes (bounded subset; the full table is manual)"
if ! bash .ci/hermes_subset.sh; then
    missing hermes_subset_verdicts "Hermes Agent could not be installed (output above)"
fi

echo "== real agent: Codex CLI (bounded subset; the full tables are manual)"
if ! bash .ci/codex_subset.sh; then
    missing codex_subset_verdicts "Codex CLI could not be installed (output above)"
fi

echo "== real agent: Gemini CLI (bounded subset; the full tables are manual)"
if ! bash .ci/gemini_subset.sh; then
    missing gemini_subset_verdicts "Gemini CLI could not be installed (output above)"
fi

echo "== real agent: pi (bounded subset; the full tables are manual)"
if ! bash .ci/pi_subset.sh; then
    missing pi_subset_verdicts "pi could not be installed (output above)"
fi

echo "== real agent: GitHub Copilot CLI (bounded subset; the full tables are manual)"
if ! bash .ci/copilot_subset.sh; then
    missing copilot_subset_verdicts "GitHub Copilot CLI could not be installed (output above)"
fi

echo "== real agent: pydantic-ai (bounded subset; the full tables are manual)"
if ! bash .ci/pydantic_ai_subset.sh; then
    missing pydantic_ai_subset_verdicts "pydantic-ai could not be installed (output above)"
fi

echo "== real agent: Claude Code (bounded subset; the full tables are manual)"
if ! bash .ci/claude_code_subset.sh; then
    missing claude_code_subset_verdicts "Claude Code could not be installed (output above)"
fi

# --- Chromium, for the HTML report's browser check -----------------------------
echo "== chromium (HTML report browser check)"
if ! command -v chromium >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
        (apt-get update && apt-get install -y --no-install-recommends chromium) || true
    fi
fi
if ! command -v chromium >/dev/null; then
    missing html_report_renders_in_chromium "chromium is not installed (apt-get install chromium, as root)"
    missing history_strip_renders_in_chromium "chromium is not installed (apt-get install chromium, as root)"
fi

# --- Containment: root and a cgroup v2 mount ------------------------------------
# tests/hostile_containment.rs checks that escapees die with their scenario's
# cgroup; it needs what chaosrun needs for that.
echo "== cgroup v2 (containment tests)"
if [ "$(id -u)" -ne 0 ] || ! grep -q ' - cgroup2 ' /proc/self/mountinfo; then
    missing _fails_hygiene_and_is_killed "needs root and a cgroup2 mount"
    missing an_untagged_agent_is_killed_by_its_handle "needs root and a cgroup2 mount"
    missing a_child_entered_before_exec_is_listed_frozen_killed_and_removed "needs root and a cgroup2 mount"
    missing sigkill_of_chaosrun_kills_an_untagged_agent_through_its_cgroup "needs root and a cgroup2 mount"
fi

# --- Worker mode: a local PostgreSQL on loopback, and the Postgres workers ------
echo "== worker mode (PostgreSQL on loopback, examples/pgworker)"
if pg_out=$(bash scripts/postgres.sh 2>&1); then
    CHAOS_PG_DSN="$(printf '%s\n' "$pg_out" | tail -n 1 | sed 's/^CHAOS_PG_DSN=//')"
    export CHAOS_PG_DSN
    echo "postgres: $CHAOS_PG_DSN"
    if ! bash examples/pgworker/setup.sh; then
        # CHAOS_PG_DSN stays set: the history test needs only the server.
        missing postgres_workers_survive_process_faults_and_seeded_chaos "examples/pgworker/setup.sh failed"
    fi
else
    printf '%s\n' "$pg_out" | tail -n 3
    missing postgres_workers_survive_process_faults_and_seeded_chaos "no local PostgreSQL (scripts/postgres.sh failed)"
    missing ten_concurrent_postgres_writers_record_exactly_ten_runs "no local PostgreSQL (scripts/postgres.sh failed)"
fi
# -------------------------------------------------------------------------------

# --- The official model SDKs, for the wire conformance suite ---------------------
# tests/sdk_conformance.rs drives `chaosrun serve --wire W` with the pinned
# openai, anthropic and google-genai SDKs (tests/sdk/conformance.py) from a venv
# under target/; tests/mcp_sdk_wire.rs drives `chaosrun serve --mcp` and
# `chaosrun mcp-stdio` with the pinned Python `mcp` SDK from the same venv.
echo "== official model SDKs (wire conformance venv)"
if ! bash scripts/sdk_venv.sh; then
    missing every_reply_kind_on_every_wire_with_the_official_sdks "the SDK venv could not be made (scripts/sdk_venv.sh, output above)"
    missing every_mcp_reply_kind_on_both_transports_with_the_python_sdk "the SDK venv (with the mcp SDK) could not be made (scripts/sdk_venv.sh, output above)"
fi
# -------------------------------------------------------------------------------

echo "== format and lint"
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings

echo "== tests"
# `cargo test` runs the lib, bin and tests/ targets; benches are compiled by
# clippy above and run only by `cargo bench` (they print figures, never assert).
cargo test --no-fail-fast -- --include-ignored "${skip_args[@]}"

if [ "${#not_run[@]}" -gt 0 ]; then
    echo "== NOT RUN here (prerequisite missing; CI fails on these):"
    printf '  %s\n' "${not_run[@]}"
fi
