#!/usr/bin/env bash
# The official model SDKs and the MCP SDK, pinned, in a venv under target/ (idempotent), for
# tests/sdk_conformance.rs (tests/sdk/conformance.py drives `chaosrun serve
# --wire W` with each SDK; tests/sdk/mcp_wire.py drives the MCP server). Prints the venv's python path as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=target/sdk-venv
PINS=(openai==3.51.0 anthropic==2.10.0 google-genai==3.3.0 mcp==2.3.0)
STAMP="$VENV/.pins"

if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "${PINS[*]}" ]; then
  echo "$VENV/bin/python"
  exit 0
fi
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}" >&2
echo "${PINS[*]}" > "$STAMP"
echo "$VENV/bin/python"
