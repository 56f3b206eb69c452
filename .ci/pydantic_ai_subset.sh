#!/usr/bin/env bash
# Optional real-agent lane: make sure pydantic-ai 2.62.0 (pinned in
# examples/pydantic-ai/setup.sh) is installed in examples/pydantic-ai/.venv,
# so that `cargo test` runs the bounded subset in tests/pydantic_ai_subset.rs
# against the one-shot agent examples/pydantic-ai/agent.py.
#
# If the package cannot be installed here (no network, no index, no python3
# venv) it says why and exits 1: scripts/test.sh then fails under CI, and
# locally leaves the pydantic-ai test out by name, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

if sh examples/pydantic-ai/setup.sh >"$log" 2>&1; then
    cat "$log"
    echo "pydantic-ai subset: pydantic-ai is installed; scripts/test.sh runs tests/pydantic_ai_subset.rs against it"
    exit 0
fi

cat "$log"
# setup.sh says which step failed on a line starting `setup.sh: `.
reason="$(grep -m1 -E '^setup\.sh: ' "$log" || true)"
echo "pydantic-ai could not be installed: ${reason:-examples/pydantic-ai/setup.sh failed (output above)}"
# setup.sh removes a half-built venv itself; make sure none is left that the
# test would take for an installed agent.
if [ -d examples/pydantic-ai/.venv ] && ! examples/pydantic-ai/.venv/bin/python -c 'import pydantic_ai.models.openai' >/dev/null 2>&1; then
    rm -rf examples/pydantic-ai/.venv
fi
exit 1
