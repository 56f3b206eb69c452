#!/usr/bin/env bash
# The reference MCP server `@modelcontextprotocol/server-everything`, pinned,
# installed into a local prefix under target/ (idempotent, offline once
# installed), for tests/mcp_proxy.rs (the MCP proxy in front of a real
# server). Prints the server's entry script as its last line: run it as
# `node PATH stdio`.
set -euo pipefail
cd "$(dirname "$0")/../.."

PIN="@modelcontextprotocol/server-everything@2026.8.31"
PREFIX=target/mcp-everything
STAMP="$PREFIX/.pin"
ENTRY="$PREFIX/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

if [ -f "$ENTRY" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$PIN" ]; then
  echo "$ENTRY"
  exit 0
fi
command -v npm >/dev/null || { echo "npm is missing (apt-get install npm)" >&2; exit 1; }
rm -rf "$PREFIX"
mkdir -p "$PREFIX"
npm install --prefix "$PREFIX" --no-audit --no-fund --save-exact "$PIN" >&2
[ -f "$ENTRY" ] || { echo "no $ENTRY after install" >&2; exit 1; }
echo "$PIN" > "$STAMP"
echo "$ENTRY"
