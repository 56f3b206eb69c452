#!/bin/sh
# Install Codex CLI 0.169.0 (pinned) into ./prefix, where codex.yaml runs it.
# The npm package is a small launcher (bin/codex.js) that runs a native Rust
# binary shipped in a platform optional dependency (@openai/codex-linux-x64 …);
# an install that skipped optional dependencies has no binary, so check it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -L "$here/prefix" ] && rm "$here/prefix"
# The locked set (npm/package.json and npm/package-lock.json beside this
# script; scripts/npm-locks.sh writes the lock) installed into prefix/lib,
# the layout `npm install -g --prefix` makes; an install of the same lock is
# kept. `npm install --no-save` installs the lock's versions and leaves it as
# it is (`npm ci` refuses a lock that lacks other platforms' optional
# packages, which a registry mirror may not serve).
lib="$here/prefix/lib"
if ! cmp -s "$here/npm/package-lock.json" "$lib/package-lock.json" || [ ! -d "$lib/node_modules/@openai/codex" ]; then
    mkdir -p "$lib"
    cp "$here/npm/package.json" "$here/npm/package-lock.json" "$lib/"
    npm install --prefix "$lib" --include=optional --no-audit --no-fund --no-save
fi
mkdir -p "$here/prefix/bin"
ln -sf ../lib/node_modules/.bin/codex "$here/prefix/bin/codex"
bin=$(find "$here/prefix/lib/node_modules/@openai" -path '*/vendor/*/bin/codex' -type f 2>/dev/null | head -n1)
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
