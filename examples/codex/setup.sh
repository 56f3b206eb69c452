#!/bin/sh
# Install Codex CLI 0.169.0 (pinned) into ./prefix, where codex.yaml runs it.
# The npm package is a small launcher (bin/codex.js) that runs a native Rust
# binary shipped in a platform optional dependency (@openai/codex-linux-x64 …);
# an install that skipped optional dependencies has no binary, so check it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -L "$here/prefix" ] && rm "$here/prefix"
if HOME="${TMPDIR:-/tmp}" "$here/prefix/bin/codex" --version 2>/dev/null | grep -qx 'codex-cli 0.169.0'; then
    echo "codex-cli 0.169.0 already installed in $here/prefix"
    exit 0
fi
npm install -g --prefix "$here/prefix" --include=optional @openai/codex@0.169.0
bin=$(find "$here/prefix/lib/node_modules/@openai/codex" -path '*/vendor/*/bin/codex' -type f 2>/dev/null | head -n1)
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "setup.sh: the native codex binary is missing under $here/prefix (npm skipped the platform optional dependency @openai/codex-<platform>?)" >&2
    exit 1
fi
# --version must name the pinned release (it also proves the binary runs here).
version=$(HOME="${TMPDIR:-/tmp}" "$here/prefix/bin/codex" --version 2>/dev/null | head -n1)
case "$version" in
    "codex-cli 0.169.0") echo "$version ($bin)" ;;
    *) echo "setup.sh: $here/prefix/bin/codex --version says '$version', not codex-cli 0.169.0" >&2; exit 1 ;;
esac
