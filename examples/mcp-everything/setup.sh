#!/usr/bin/env bash
# The reference MCP server `@modelcontextprotocol/server-everything`, pinned,
# installed into a local prefix under target/ (idempotent, offline once
# installed), for tests/mcp_proxy.rs (the MCP proxy in front of a real
# server). Prints the server's entry script as its last line: run it as
# `node PATH stdio`.
set -euo pipefail
cd "$(dirname "$0")/../.."

# The pin and its dependencies: examples/mcp-everything/npm/package.json and
# the package-lock.json scripts/npm-locks.sh resolves for it, installed as
# locked (`npm install --no-save` keeps the lock as it is).
LOCK=examples/mcp-everything/npm
PREFIX=target/mcp-everything
ENTRY="$PREFIX/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

if [ -f "$ENTRY" ] && cmp -s "$LOCK/package-lock.json" "$PREFIX/package-lock.json"; then
  echo "$ENTRY"
  exit 0
fi
command -v npm >/dev/null || { echo "npm is missing (apt-get install npm)" >&2; exit 1; }
rm -rf "$PREFIX"
mkdir -p "$PREFIX"
cp "$LOCK/package.json" "$LOCK/package-lock.json" "$PREFIX/"
npm install --prefix "$PREFIX" --no-audit --no-fund --no-save >&2
[ -f "$ENTRY" ] || { echo "no $ENTRY after install" >&2; exit 1; }
echo "$ENTRY"
