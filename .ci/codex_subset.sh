#!/usr/bin/env bash
# Optional real-agent lane: make sure Codex CLI 0.169.0 (pinned in
# examples/codex/setup.sh) is installed, so that `cargo test` runs the bounded
# Codex subset in tests/codex_subset.rs against it.
#
# If the package cannot be installed here (no npm, no registry, no native
# binary for this platform) it says why and exits 1: scripts/test.sh then fails
# under CI, and locally leaves the Codex test out by name, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

if ! command -v npm >/dev/null; then
    echo "codex could not be installed: npm is not on PATH"
    exit 1
fi
if bash examples/codex/setup.sh >"$log" 2>&1; then
    cat "$log"
    echo "codex subset: Codex CLI is installed; scripts/test.sh runs tests/codex_subset.rs against it"
    exit 0
fi

cat "$log"
reason="$(grep -m1 -E '^setup\.sh: |npm (ERR|error)' "$log" || true)"
echo "codex could not be installed: ${reason:-examples/codex/setup.sh failed (output above)}"
# A half-installed prefix would make the test think Codex is there.
if [ -d examples/codex/prefix ] && ! examples/codex/prefix/bin/codex --version >/dev/null 2>&1; then
    rm -rf examples/codex/prefix
fi
exit 1
