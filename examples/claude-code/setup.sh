#!/bin/sh
# Install Claude Code 2.1.328 (pinned) into ./prefix, where claude-code.yaml runs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -L "$here/prefix" ] && rm "$here/prefix"
# The locked set (npm/package.json and npm/package-lock.json beside this
# script; scripts/npm-locks.sh writes the lock) installed into prefix/lib,
# the layout `npm install -g --prefix` makes; an install of the same lock is
# kept. `npm install --no-save` installs the lock's versions and leaves it as
# it is (`npm ci` refuses a lock that lacks other platforms' optional
# packages, which a registry mirror may not serve).
pin=2.1.328
# Its ACP adapter (claude-code-acp.yaml runs prefix/bin/claude-agent-acp), pinned in the
# same lock; another version of the agent gets this adapter too.
acp_pkg=@zed-industries/claude-agent-acp
acp_pin=0.23.1
version=${CHAOSRUN_AGENT_VERSION:-$pin}
lib="$here/prefix/lib"
if [ "$version" != "$pin" ]; then
    # Another version (`chaosrun agents setup claude-code@VERSION`): no lock is
    # kept for it, so its dependencies are what the registry resolves today.
    if ! grep -qs "\"version\": \"$version\"" "$lib/node_modules/@anthropic-ai/claude-code/package.json"; then
        rm -rf "$lib"
        mkdir -p "$lib"
        printf '{"private": true, "dependencies": {"%s": "%s", "%s": "%s"}}\n' "@anthropic-ai/claude-code" "$version" "$acp_pkg" "$acp_pin" > "$lib/package.json"
        npm install --prefix "$lib" --include=optional --no-audit --no-fund --no-save
    fi
elif ! cmp -s "$here/npm/package-lock.json" "$lib/package-lock.json" || [ ! -d "$lib/node_modules/@anthropic-ai/claude-code" ] || [ ! -d "$lib/node_modules/$acp_pkg" ]; then
    mkdir -p "$lib"
    cp "$here/npm/package.json" "$here/npm/package-lock.json" "$lib/"
    npm install --prefix "$lib" --include=optional --no-audit --no-fund --no-save
fi
mkdir -p "$here/prefix/bin"
ln -sf ../lib/node_modules/.bin/claude-agent-acp "$here/prefix/bin/claude-agent-acp"
ln -sf ../lib/node_modules/.bin/claude "$here/prefix/bin/claude"
DISABLE_AUTOUPDATER=1 "$here/prefix/bin/claude" --version
