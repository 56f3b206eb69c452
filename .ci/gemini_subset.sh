#!/usr/bin/env bash
# Optional real-agent lane: make sure Gemini CLI 0.61.0 (pinned in
# examples/gemini-cli/setup.sh) is installed, so that `cargo test` runs the
# bounded Gemini CLI subset in tests/gemini_subset.rs against it.
#
# If the package cannot be installed here (no npm, no registry) it says why
# and exits 1: scripts/test.sh then fails under CI, and locally leaves the
# Gemini CLI test out by name, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

if ! command -v npm >/dev/null 2>&1; then
    echo "gemini-cli could not be installed: npm not found"
    exit 1
fi
if bash examples/gemini-cli/setup.sh >"$log" 2>&1 \
    && [ "$(examples/gemini-cli/prefix/bin/gemini --version 2>/dev/null)" = "0.61.0" ]; then
    cat "$log"
    echo "gemini subset: Gemini CLI 0.61.0 is installed; scripts/test.sh runs tests/gemini_subset.rs against it"
    exit 0
fi

cat "$log"
reason="$(grep -m1 -E 'npm (ERR|error)' "$log" || true)"
echo "gemini-cli could not be installed: ${reason:-examples/gemini-cli/setup.sh failed (output above)}"
# A half-installed prefix would make the test think Gemini CLI is there.
if [ -d examples/gemini-cli/prefix ] && ! examples/gemini-cli/prefix/bin/gemini --version >/dev/null 2>&1; then
    rm -rf examples/gemini-cli/prefix
fi
exit 1
