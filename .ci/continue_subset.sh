#!/usr/bin/env bash
# Optional real-agent lane: make sure Continue CLI 1.5.47 (pinned in
# examples/continue/setup.sh) is installed, so that `cargo test` runs the
# bounded Continue CLI subset in tests/continue_subset.rs against it.
#
# If the package cannot be installed here (no npm, no registry) it says why
# and exits 1: scripts/test.sh then fails under CI, and locally leaves the
# Continue CLI test out by name, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

if ! command -v npm >/dev/null 2>&1; then
    echo "Continue CLI could not be installed: npm not found"
    exit 1
fi
if bash examples/continue/setup.sh >"$log" 2>&1 \
    && [ "$(NODE_OPTIONS=--import=./examples/continue/offline.mjs examples/continue/prefix/bin/cn --version 2>&1)" = "1.5.47" ]; then
    cat "$log"
    echo "Continue CLI subset: Continue CLI 1.5.47 is installed; scripts/test.sh runs tests/continue_subset.rs against it"
    exit 0
fi

cat "$log"
reason="$(grep -m1 -E 'npm (ERR|error)' "$log" || true)"
echo "Continue CLI could not be installed: ${reason:-examples/continue/setup.sh failed (output above)}"
# A half-installed prefix would make the test think cn is there.
if [ -d examples/continue/prefix ] && ! NODE_OPTIONS=--import=./examples/continue/offline.mjs examples/continue/prefix/bin/cn --version >/dev/null 2>&1; then
    rm -rf examples/continue/prefix
fi
exit 1
