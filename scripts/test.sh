#!/usr/bin/env bash
# The project's test command (README "Run the tests"; .ci/run calls it).
# Installs what the tests need, then runs formatting, lint and every test.
# A real-agent suite that cannot be installed here is skipped loudly, never
# silently passed.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== toolchain"
cargo --version
python3 --version

echo "== optional real agent: Hermes (bounded subset; full table is manual)"
if [ -x .ci/hermes_subset.sh ] || [ -f .ci/hermes_subset.sh ]; then
  bash .ci/hermes_subset.sh
fi

# --- Chromium, for the HTML report's browser check -----------------------------
# tests/report_formats.rs renders the `--html` report in headless Chromium (the
# failed scenario's SVG must be in the rendered DOM) and keeps a screenshot in
# target/test-artifacts/. Install it once, idempotently, from Debian's packages;
# without it that check is skipped loudly and the other report checks still run.
echo "== chromium (HTML report browser check)"
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    (apt-get update && apt-get install -y --no-install-recommends chromium) \
      || echo "WARNING: chromium could not be installed; the HTML browser check will be skipped"
  else
    echo "WARNING: chromium is not installed and this is not root; the HTML browser check will be skipped"
  fi
fi
# -------------------------------------------------------------------------------

# --- Worker mode: a local PostgreSQL on loopback, and the Postgres workers ------
# tests/workers.rs runs process_faults.yaml against three Postgres-backed
# workers (examples/pgworker). scripts/postgres.sh installs and starts the
# server on 127.0.0.1:55432 (idempotent); without it, that test is skipped
# loudly.
echo "== worker mode (PostgreSQL on loopback, examples/pgworker)"
if pg_out=$(bash scripts/postgres.sh 2>&1); then
  CHAOS_PG_DSN="$(printf '%s\n' "$pg_out" | tail -n 1 | sed 's/^CHAOS_PG_DSN=//')"
  export CHAOS_PG_DSN
  echo "postgres: $CHAOS_PG_DSN"
  if ! bash examples/pgworker/setup.sh; then
    echo "SKIP: examples/pgworker/setup.sh failed; the worker-mode test will be skipped"
    unset CHAOS_PG_DSN
  fi
else
  printf '%s\n' "$pg_out" | tail -n 3
  echo "SKIP: no local PostgreSQL; the worker-mode test will be skipped"
fi
# -------------------------------------------------------------------------------

# --- The official model SDKs, for the wire conformance suite ---------------------
# tests/sdk_conformance.rs drives `chaosrun serve --wire W` with the pinned
# openai, anthropic and google-genai SDKs (tests/sdk/conformance.py) from a venv
# under target/. Not optional: a venv that cannot be made fails the run.
echo "== official model SDKs (wire conformance venv)"
bash scripts/sdk_venv.sh
# -------------------------------------------------------------------------------

echo "== format and lint"
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings

echo "== tests"
# `cargo test` runs the lib, bin and tests/ targets; benches are compiled by
# clippy above and run only by `cargo bench` (they print figures, never assert).
cargo test
# Ignored by plain `cargo test` (it needs the venv made above).
cargo test --test sdk_conformance -- --include-ignored
