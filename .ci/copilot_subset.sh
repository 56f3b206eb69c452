#!/usr/bin/env bash
# Optional real-agent lane: make sure GitHub Copilot CLI 1.0.102 (pinned in
# examples/copilot/setup.sh) is installed, so that `cargo test` runs the
# bounded GitHub Copilot CLI subset in tests/copilot_subset.rs against it.
#
# If the package cannot be installed here (no npm, no registry) it says why
# and exits 1: scripts/test.sh then fails under CI, and locally leaves the
# GitHub Copilot CLI test out by name, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

if ! command -v npm >/dev/null 2>&1; then
    echo "copilot could not be installed: npm not found"
    exit 1
fi
if bash examples/copilot/setup.sh >"$log" 2>&1 \
    && [ "$(examples/copilot/prefix/bin/copilot --version 2>/dev/null | head -1)" = "GitHub Copilot CLI 1.0.102." ]; then
    cat "$log"
    echo "copilot subset: GitHub Copilot CLI 1.0.102 is installed; scripts/test.sh runs tests/copilot_subset.rs against it"
    exit 0
fi

cat "$log"
reason="$(grep -m1 -E 'npm (ERR|error)' "$log" || true)"
echo "copilot could not be installed: ${reason:-examples/copilot/setup.sh failed (output above)}"
# A half-installed prefix would make the test think GitHub Copilot CLI is there.
if [ -d examples/copilot/prefix ] && ! examples/copilot/prefix/bin/copilot --version >/dev/null 2>&1; then
    rm -rf examples/copilot/prefix
fi
exit 1
