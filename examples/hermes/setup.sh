#!/usr/bin/env bash
# Install Hermes Agent (pinned) into examples/hermes/.venv for the chaosrun driver,
# with every transitive dependency pinned by requirements.lock (installed as is,
# --no-deps, then `pip check`), so cited line numbers do not move with the
# install day. Idempotent: does nothing when the venv's `pip freeze` is the lock.
set -euo pipefail

PIN="0.19.0"
# Another version (`chaosrun agents setup hermes@VERSION`) installs unlocked:
# hermes-agent[mcp,acp]==VERSION with what PyPI resolves for it today.
HERMES_VERSION="${CHAOSRUN_AGENT_VERSION:-$PIN}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
LOCK="$HERE/requirements.lock"
PY="${PYTHON:-python3}"

if ! command -v "$PY" >/dev/null 2>&1; then
    echo "setup.sh: '$PY' not found; install Python 3.11 or set PYTHON=/path/to/python3.11" >&2
    exit 1
fi

installed_version() {
    "$VENV/bin/python" - <<'PYEOF' 2>/dev/null || true
import importlib.metadata as m
try:
    print(m.version("hermes-agent"))
except m.PackageNotFoundError:
    pass
PYEOF
}

locked() { [ "$HERMES_VERSION" != "$PIN" ] || [ "$("$VENV/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null | sort)" = "$(grep -v '^#' "$LOCK" | sort)" ]; }

if [ -x "$VENV/bin/python" ]; then
    have="$(installed_version)"
    if [ "$have" = "$HERMES_VERSION" ] && locked; then
        echo "setup.sh: $VENV already has hermes-agent==$HERMES_VERSION and the locked set; nothing to do"
        exit 0
    fi
    echo "setup.sh: $VENV exists (hermes-agent: ${have:-not installed}) but is not the locked set; recreating it"
    rm -rf "$VENV"
    "$PY" -m venv "$VENV" || { echo "setup.sh: '$PY -m venv' failed" >&2; exit 1; }
else
    echo "setup.sh: creating venv $VENV with $("$PY" --version 2>&1)"
    if ! "$PY" -m venv "$VENV"; then
        echo "setup.sh: '$PY -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
        exit 1
    fi
fi

# The lock is hermes-agent[mcp,acp]: the `mcp` extra brings Hermes' MCP client
# (the pinned `mcp` SDK) for the MCP rows; the `acp` extra (agent-client-protocol
# 0.9.0) is what its `hermes-acp` entry point imports (hermes-acp.yaml).
echo "setup.sh: pip install --no-deps -r $LOCK (hermes-agent[mcp,acp]==$HERMES_VERSION)"
if [ "$HERMES_VERSION" = "$PIN" ]; then
    set -- --no-deps -r "$LOCK"
else
    set -- "hermes-agent[mcp,acp]==$HERMES_VERSION"
fi
if ! "$VENV/bin/python" -m pip install --disable-pip-version-check "$@"; then
    echo "setup.sh: pip could not install the pinned set in $LOCK (see pip's output above);" \
         "fix the index/network and re-run $0" >&2
    exit 1
fi
if ! "$VENV/bin/python" -m pip check --disable-pip-version-check; then
    echo "setup.sh: $LOCK is not a consistent set (pip check above)" >&2
    exit 1
fi

have="$(installed_version)"
if [ "$have" != "$HERMES_VERSION" ]; then
    echo "setup.sh: after install the venv reports hermes-agent '${have:-missing}', expected $HERMES_VERSION" >&2
    exit 1
fi
echo "setup.sh: done; hermes-agent==$HERMES_VERSION is in $VENV"
echo "setup.sh: run it with: chaosrun --agent $HERE/hermes scenarios.yaml"
