#!/usr/bin/env bash
# Create examples/pgworker/.venv with psycopg (binary wheels) for the pgworker.
# Idempotent: does nothing when the venv already imports the pinned psycopg.
set -euo pipefail

PSYCOPG_SPEC='psycopg[binary]==3.2.*'
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
PY="${PYTHON:-python3}"

have_psycopg() {
    [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<'PYEOF' >/dev/null 2>&1
import psycopg
assert psycopg.__version__.startswith("3.2."), psycopg.__version__
psycopg.pq.version()          # the binary libpq loads
PYEOF
}

if have_psycopg; then
    echo "setup.sh: $VENV already has $PSYCOPG_SPEC; nothing to do"
    exit 0
fi
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "setup.sh: '$PY' not found; install Python >= 3.10 or set PYTHON=/path/to/python3" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV" || {
        echo "setup.sh: '$PY -m venv $VENV' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
        exit 1
    }
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$PSYCOPG_SPEC" || {
    echo "setup.sh: pip install '$PSYCOPG_SPEC' into $VENV failed (network? PyPI mirror?)" >&2
    exit 1
}
if ! have_psycopg; then
    echo "setup.sh: $VENV still cannot import psycopg 3.2 after the install" >&2
    exit 1
fi
echo "setup.sh: $VENV ready ($("$VENV/bin/python" -c 'import psycopg; print("psycopg", psycopg.__version__)'))"
