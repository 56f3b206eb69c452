#!/usr/bin/env bash
# Optional real-agent lane: make sure Claude Code (pinned in
# examples/claude-code/setup.sh) is installed, so that `cargo test` runs the
# bounded Claude Code subset in tests/claude_code_subset.rs against it.
#
# If the package cannot be installed here (no npm, no registry) it says why
# and exits 1: scripts/test.sh then fails under CI, and locally leaves the
# Claude Code test out by name, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

if ! command -v npm >/dev/null; then
    echo "claude-code could not be installed: npm is not on PATH"
    exit 1
fi
if bash examples/claude-code/setup.sh >"$log" 2>&1; then
    cat "$log"
    echo "claude-code subset: Claude Code is installed; scripts/test.sh runs tests/claude_code_subset.rs against it"
    exit 0
fi
cat "$log"
reason="$(grep -m1 -E 'npm (ERR|error)' "$log" || true)"
echo "claude-code could not be installed: ${reason:-examples/claude-code/setup.sh failed (output above)}"
# A half-installed prefix would make the test think Claude Code is there.
if [ -d examples/claude-code/prefix ] && ! examples/claude-code/prefix/bin/claude --version >/dev/null 2>&1; then
    rm -rf examples/claude-code/prefix
fi
exit 1
