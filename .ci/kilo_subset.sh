#!/usr/bin/env bash
# Optional real-agent lane: make sure Kilo CLI 7.7.7 (pinned in
# examples/kilo/setup.sh, npm @kilocode/cli@7.7.7) is installed, so that `cargo test` runs
# the bounded subset in tests/kilo_subset.rs against it.
#
# If the package cannot be installed here (no npm, no registry) it says why
# and exits 1: scripts/test.sh then fails under CI, and locally leaves the
# test out by name, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

if ! command -v npm >/dev/null 2>&1; then
    echo "kilo could not be installed: npm not found"
    exit 1
fi
if bash examples/kilo/setup.sh >"$log" 2>&1 \
    && [ "$(examples/kilo/prefix/bin/kilo --version 2>/dev/null)" = "7.7.7" ]; then
    cat "$log"
    echo "kilo subset: Kilo CLI 7.7.7 is installed; scripts/test.sh runs tests/kilo_subset.rs against it"
    exit 0
fi

cat "$log"
reason="$(grep -m1 -E 'npm (ERR|error)' "$log" || true)"
echo "kilo could not be installed: ${reason:-examples/kilo/setup.sh failed (output above)}"
# A half-installed prefix would make the test think it is there.
if [ -d examples/kilo/prefix ] && ! examples/kilo/prefix/bin/kilo --version >/dev/null 2>&1; then
    rm -rf examples/kilo/prefix
fi
exit 1
