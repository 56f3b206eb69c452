#!/usr/bin/env bash
# Optional real-agent lane: make sure aider 0.86.2 (pinned in
# examples/aider/setup.sh) is installed in examples/aider/.venv,
# so that `cargo test` runs the bounded subset in tests/aider_subset.rs
# against aider itself (examples/aider/aider.yaml, exec mode).
#
# If the package cannot be installed here (no network, no index, no python3
# venv) it says why and exits 1: scripts/test.sh then fails under CI, and
# locally leaves the aider test out by name, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

if sh examples/aider/setup.sh >"$log" 2>&1; then
    cat "$log"
    echo "aider subset: aider is installed; scripts/test.sh runs tests/aider_subset.rs against it"
    exit 0
fi

cat "$log"
# setup.sh says which step failed on a line starting `setup.sh: `.
reason="$(grep -m1 -E '^setup\.sh: ' "$log" || true)"
echo "aider could not be installed: ${reason:-examples/aider/setup.sh failed (output above)}"
# setup.sh removes a half-built venv itself; make sure none is left that the
# test would take for an installed agent.
if [ -d examples/aider/.venv ] && ! examples/aider/.venv/bin/python -c "import aider.main" >/dev/null 2>&1; then
    rm -rf examples/aider/.venv
fi
exit 1
