#!/bin/sh
# Install GitHub Copilot CLI 1.0.102 (npm @github/copilot, pinned) into ./prefix,
# where copilot.yaml runs it, and extract its JS package once into
# ./prefix/pkgcache (COPILOT_PKG_CACHE_HOME in the profile): the native
# launcher otherwise unpacks 235 MB into every scenario's fresh HOME (8 s).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -L "$here/prefix" ] && rm "$here/prefix"
# The locked set (npm/package.json and npm/package-lock.json beside this
# script; scripts/npm-locks.sh writes the lock) installed into prefix/lib,
# the layout `npm install -g --prefix` makes; an install of the same lock is
# kept. `npm install --no-save` installs the lock's versions and leaves it as
# it is (`npm ci` refuses a lock that lacks other platforms' optional
# packages, which a registry mirror may not serve).
pin=1.0.102
version=${CHAOSRUN_AGENT_VERSION:-$pin}
lib="$here/prefix/lib"
if [ "$version" != "$pin" ]; then
    # Another version (`chaosrun agents setup copilot@VERSION`): no lock is
    # kept for it, so its dependencies are what the registry resolves today.
    if ! grep -qs "\"version\": \"$version\"" "$lib/node_modules/@github/copilot/package.json"; then
        rm -rf "$lib"
        mkdir -p "$lib"
        printf '{"private": true, "dependencies": {"%s": "%s"}}\n' "@github/copilot" "$version" > "$lib/package.json"
        npm install --prefix "$lib" --include=optional --no-audit --no-fund --no-save
    fi
elif ! cmp -s "$here/npm/package-lock.json" "$lib/package-lock.json" || [ ! -d "$lib/node_modules/@github/copilot" ]; then
    mkdir -p "$lib"
    cp "$here/npm/package.json" "$here/npm/package-lock.json" "$lib/"
    npm install --prefix "$lib" --include=optional --no-audit --no-fund --no-save
fi
mkdir -p "$here/prefix/bin"
ln -sf ../lib/node_modules/.bin/copilot "$here/prefix/bin/copilot"
COPILOT_SEA_EXTRACT_ONLY=1 COPILOT_PKG_CACHE_HOME="$here/prefix/pkgcache" "$here/prefix/bin/copilot"
test -f "$here/prefix/pkgcache/pkg/linux-x64/$version/index.js"
"$here/prefix/bin/copilot" --version
