#!/usr/bin/env bash
# Optional real-agent lane: make sure opencode 1.18.33 (pinned in
# examples/opencode/setup.sh, npm opencode-ai@1.18.33) is installed, so that `cargo test` runs
# the bounded subset in tests/opencode_subset.rs against it.
#
# If the package cannot be installed here (no npm, no registry) it says why
# and exits 1: scripts/test.sh then fails under CI, and locally leaves the
# test out by name, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

if ! command -v npm >/dev/null 2>&1; then
    echo "opencode could not be installed: npm not found"
    exit 1
fi
if bash examples/opencode/setup.sh >"$log" 2>&1 \
    && [ "$(examples/opencode/prefix/bin/opencode --version 2>/dev/null)" = "1.18.33" ]; then
    cat "$log"
    echo "opencode subset: opencode 1.18.33 is installed; scripts/test.sh runs tests/opencode_subset.rs against it"
    exit 0
fi

cat "$log"
reason="$(grep -m1 -E 'npm (ERR|error)' "$log" || true)"
echo "opencode could not be installed: ${reason:-examples/opencode/setup.sh failed (output above)}"
# A half-installed prefix would make the test think it is there.
if [ -d examples/opencode/prefix ] && ! examples/opencode/prefix/bin/opencode --version >/dev/null 2>&1; then
    rm -rf examples/opencode/prefix
fi
exit 1
