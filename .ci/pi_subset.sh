#!/usr/bin/env bash
# Optional real-agent lane: make sure pi 0.73.1 (pinned in
# examples/pi/setup.sh) is installed, so that `cargo test` runs the
# bounded pi subset in tests/pi_subset.rs against it.
#
# If the package cannot be installed here (no npm, no registry) it says why
# and exits 1: scripts/test.sh then fails under CI, and locally leaves the
# pi test out by name, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

if ! command -v npm >/dev/null 2>&1; then
    echo "pi could not be installed: npm not found"
    exit 1
fi
if bash examples/pi/setup.sh >"$log" 2>&1 \
    && [ "$(PI_OFFLINE=1 examples/pi/prefix/bin/pi --version 2>&1)" = "0.73.1" ]; then
    cat "$log"
    echo "pi subset: pi 0.73.1 is installed; scripts/test.sh runs tests/pi_subset.rs against it"
    exit 0
fi

cat "$log"
reason="$(grep -m1 -E 'npm (ERR|error)' "$log" || true)"
echo "pi could not be installed: ${reason:-examples/pi/setup.sh failed (output above)}"
# A half-installed prefix would make the test think pi is there.
if [ -d examples/pi/prefix ] && ! examples/pi/prefix/bin/pi --version >/dev/null 2>&1; then
    rm -rf examples/pi/prefix
fi
exit 1
