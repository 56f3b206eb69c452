#!/bin/sh
# Install pydantic-ai 2.62.0 (pinned; the slim package with the OpenAI and MCP extras)
# into ./.venv, where agent.py runs. Idempotent: an existing venv that already
# imports the pinned version is kept. Exits non-zero, saying which step failed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
want=2.62.0
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.metadata as m, sys, pydantic_ai.mcp; sys.exit(m.version('pydantic-ai-slim') != '$want')" 2>/dev/null; then
    echo "pydantic-ai-slim $want already installed in $venv"
    exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv" || { echo "setup.sh: 'python3 -m venv' failed"; exit 1; }
"$venv/bin/pip" install --quiet --disable-pip-version-check "pydantic-ai-slim[openai,mcp]==$want" \
    || { echo "setup.sh: could not install pydantic-ai-slim[openai,mcp]==$want"; rm -rf "$venv"; exit 1; }
"$venv/bin/python" -c "import importlib.metadata as m; print('pydantic-ai-slim', m.version('pydantic-ai-slim'), 'openai', m.version('openai'))" \
    || { echo "setup.sh: after install the venv reports no pydantic-ai-slim"; exit 1; }
