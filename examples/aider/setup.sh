#!/bin/sh
# Install aider (PyPI aider-chat 0.86.2, pinned) into ./.venv, with every
# transitive dependency pinned by requirements.lock (installed as is,
# --no-deps, then `pip check`), so the code the README cites is the same on
# every install day. Idempotent: an existing venv whose `pip freeze` is
# exactly the lock is kept. Exits non-zero, saying which step failed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
lock="$here/requirements.lock"
pin=0.86.2
# Another version (`chaosrun agents setup aider@VERSION`) installs unlocked:
# aider-chat==VERSION as PyPI resolves it today.
want=${CHAOSRUN_AGENT_VERSION:-$pin}
pins() { grep -v '^#' "$lock" | sort; }
if [ "$want" != "$pin" ]; then
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('aider-chat') != '$want')" 2>/dev/null; then
        echo "aider-chat $want already installed in $venv"
        exit 0
    fi
    rm -rf "$venv"
    python3 -m venv "$venv" || { echo "setup.sh: 'python3 -m venv' failed"; exit 1; }
    "$venv/bin/pip" install --quiet --disable-pip-version-check "aider-chat==$want" \
        || { echo "setup.sh: could not install aider-chat $want"; rm -rf "$venv"; exit 1; }
elif [ -x "$venv/bin/pip" ] && [ "$("$venv/bin/pip" freeze --disable-pip-version-check 2>/dev/null | sort)" = "$(pins)" ]; then
    echo "aider-chat $want and its locked dependencies already installed in $venv"
    exit 0
else
    rm -rf "$venv"
    python3 -m venv "$venv" || { echo "setup.sh: 'python3 -m venv' failed"; exit 1; }
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$lock" \
        || { echo "setup.sh: could not install the pinned set in $lock"; rm -rf "$venv"; exit 1; }
fi
"$venv/bin/pip" check --disable-pip-version-check \
    || { echo "setup.sh: $lock is not a consistent set (pip check above)"; exit 1; }
"$venv/bin/python" -c "import importlib.metadata as m, sys; v = m.version('aider-chat'); print('aider-chat', v, 'litellm', m.version('litellm'), 'openai', m.version('openai')); sys.exit(v != '$want')" \
    || { echo "setup.sh: after install the venv has no aider-chat $want"; exit 1; }
