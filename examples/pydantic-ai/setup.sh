#!/bin/sh
# Install pydantic-ai 2.62.0 (pinned; the slim package with the OpenAI and MCP extras)
# into ./.venv, where agent.py runs, with every transitive dependency pinned by
# requirements.lock (installed as is, --no-deps, then `pip check`), so the code
# the README cites is the same on every install day. Idempotent: an existing
# venv whose `pip freeze` is exactly the lock is kept. Exits non-zero, saying
# which step failed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
lock="$here/requirements.lock"
pin=2.62.0
# Another version (`chaosrun agents setup pydantic-ai@VERSION`) installs
# unlocked: pydantic-ai-slim[openai,mcp]==VERSION as PyPI resolves it today.
want=${CHAOSRUN_AGENT_VERSION:-$pin}
pins() { grep -v '^#' "$lock" | sort; }
if [ "$want" != "$pin" ]; then
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('pydantic-ai-slim') != '$want')" 2>/dev/null; then
        echo "pydantic-ai-slim $want already installed in $venv"
        exit 0
    fi
    rm -rf "$venv"
    python3 -m venv "$venv" || { echo "setup.sh: 'python3 -m venv' failed"; exit 1; }
    "$venv/bin/pip" install --quiet --disable-pip-version-check "pydantic-ai-slim[openai,mcp]==$want" \
        || { echo "setup.sh: could not install pydantic-ai-slim $want"; rm -rf "$venv"; exit 1; }
elif [ -x "$venv/bin/pip" ] && [ "$("$venv/bin/pip" freeze --disable-pip-version-check 2>/dev/null | sort)" = "$(pins)" ]; then
    echo "pydantic-ai-slim $want and its locked dependencies already installed in $venv"
    exit 0
else
    rm -rf "$venv"
    python3 -m venv "$venv" || { echo "setup.sh: 'python3 -m venv' failed"; exit 1; }
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$lock" \
        || { echo "setup.sh: could not install the pinned set in $lock"; rm -rf "$venv"; exit 1; }
fi
"$venv/bin/pip" check --disable-pip-version-check \
    || { echo "setup.sh: $lock is not a consistent set (pip check above)"; exit 1; }
"$venv/bin/python" -c "import importlib.metadata as m, sys, pydantic_ai.mcp; v = m.version('pydantic-ai-slim'); print('pydantic-ai-slim', v, 'openai', m.version('openai')); sys.exit(v != '$want')" \
    || { echo "setup.sh: after install the venv has no pydantic-ai-slim $want"; exit 1; }
