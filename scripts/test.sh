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

echo "== format and lint"
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings

echo "== tests"
# `cargo test` runs the lib, bin and tests/ targets; benches are compiled by
# clippy above and run only by `cargo bench` (they print figures, never assert).
cargo test
