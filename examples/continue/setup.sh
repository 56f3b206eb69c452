#!/bin/sh
# Install Continue CLI 1.5.47 (pinned) into ./prefix, where continue.yaml runs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -L "$here/prefix" ] && rm "$here/prefix"
# The locked set (npm/package.json and npm/package-lock.json beside this
# script; scripts/npm-locks.sh writes the lock) installed into prefix/lib,
# the layout `npm install -g --prefix` makes; an install of the same lock is
# kept. `npm install --no-save` installs the lock's versions and leaves it as
# it is (`npm ci` refuses a lock that lacks other platforms' optional
# packages, which a registry mirror may not serve).
pin=1.5.47
version=${CHAOSRUN_AGENT_VERSION:-$pin}
lib="$here/prefix/lib"
if [ "$version" != "$pin" ]; then
    # Another version (`chaosrun agents setup continue-cli@VERSION`): no lock is
    # kept for it, so its dependencies are what the registry resolves today.
    if ! grep -qs "\"version\": \"$version\"" "$lib/node_modules/@continuedev/cli/package.json"; then
        rm -rf "$lib"
        mkdir -p "$lib"
        printf '{"private": true, "dependencies": {"%s": "%s"}}\n' "@continuedev/cli" "$version" > "$lib/package.json"
        npm install --prefix "$lib" --include=optional --no-audit --no-fund --no-save
    fi
elif ! cmp -s "$here/npm/package-lock.json" "$lib/package-lock.json" || [ ! -d "$lib/node_modules/@continuedev/cli" ]; then
    mkdir -p "$lib"
    cp "$here/npm/package.json" "$here/npm/package-lock.json" "$lib/"
    npm install --prefix "$lib" --include=optional --no-audit --no-fund --no-save
fi
mkdir -p "$here/prefix/bin"
ln -sf ../lib/node_modules/.bin/cn "$here/prefix/bin/cn"
# offline.mjs: no update check (src/version.ts:42) from this --version either
NODE_OPTIONS="--import=$here/offline.mjs" "$here/prefix/bin/cn" --version
