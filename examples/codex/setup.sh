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
pin=0.169.0
# Its ACP adapter (codex-acp.yaml runs prefix/bin/codex-acp), pinned in the
# same lock; another version of the agent gets this adapter too.
acp_pkg=@zed-industries/codex-acp
acp_pin=0.16.0
version=${CHAOSRUN_AGENT_VERSION:-$pin}
lib="$here/prefix/lib"
if [ "$version" != "$pin" ]; then
    # Another version (`chaosrun agents setup codex@VERSION`): no lock is
    # kept for it, so its dependencies are what the registry resolves today.
    if ! grep -qs "\"version\": \"$version\"" "$lib/node_modules/@openai/codex/package.json"; then
        rm -rf "$lib"
        mkdir -p "$lib"
        printf '{"private": true, "dependencies": {"%s": "%s", "%s": "%s"}}\n' "@openai/codex" "$version" "$acp_pkg" "$acp_pin" > "$lib/package.json"
        npm install --prefix "$lib" --include=optional --no-audit --no-fund --no-save
    fi
elif ! cmp -s "$here/npm/package-lock.json" "$lib/package-lock.json" || [ ! -d "$lib/node_modules/@openai/codex" ] || [ ! -d "$lib/node_modules/$acp_pkg" ]; then
    mkdir -p "$lib"
    cp "$here/npm/package.json" "$here/npm/package-lock.json" "$lib/"
    npm install --prefix "$lib" --include=optional --no-audit --no-fund --no-save
fi
mkdir -p "$here/prefix/bin"
ln -sf ../lib/node_modules/.bin/codex-acp "$here/prefix/bin/codex-acp"
ln -sf ../lib/node_modules/.bin/codex "$here/prefix/bin/codex"
bin=$(find "$here/prefix/lib/node_modules/@openai" -path '*/vendor/*/bin/codex' -type f 2>/dev/null | head -n1)
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "setup.sh: the native codex binary is missing under $here/prefix (npm skipped the platform optional dependency @openai/codex-<platform>?)" >&2
    exit 1
fi
# --version must name the pinned release (it also proves the binary runs here).
said=$(HOME="${TMPDIR:-/tmp}" "$here/prefix/bin/codex" --version 2>/dev/null | head -n1)
case "$said" in
    "codex-cli $version") echo "$said ($bin)" ;;
    *) echo "setup.sh: $here/prefix/bin/codex --version says '$said', not codex-cli $version" >&2; exit 1 ;;
esac
