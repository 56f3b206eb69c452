#!/usr/bin/env bash
# Ensure a local PostgreSQL server for chaosrun's Postgres-backed agents
# (examples/pgworker): 127.0.0.1:55432 only, trust auth, database `chaosrun`,
# superuser `chaosrun`. The last line printed is
#   CHAOS_PG_DSN=host=127.0.0.1 port=55432 dbname=chaosrun user=chaosrun
#
#   scripts/postgres.sh                  # run: prints the DSN line
#   source scripts/postgres.sh           # source: also exports CHAOS_PG_DSN
#   export CHAOS_PG_DSN="$(scripts/postgres.sh | tail -n1 | sed 's/^CHAOS_PG_DSN=//')"
#   scripts/postgres.sh stop             # stop the server (if it runs)
#
# Idempotent, and fast (< 1 s) when the server already answers. Installs
# PostgreSQL with apt-get if initdb/pg_ctl are missing. Postgres refuses to run
# as root, so as root the cluster is owned by the system user `chaosrun-pg`.
# Data, socket and log live in $CHAOSRUN_PG_DIR (default /var/tmp/chaosrun-pg).
# Exit 3 with a line `SKIP: postgres unavailable: <why>` when it cannot be had.
# When this call started the server (it was not running), a line
# `CHAOS_PG_STARTED=<data dir>` comes before the DSN line: scripts/test.sh
# reads it to stop, at its end, the server its own run started (and leaves
# alone one that was already running).
#
# Stop it:   scripts/postgres.sh stop
# Remove it: stop it, then rm -rf /var/tmp/chaosrun-pg

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
    # Sourced: run as a child (so `set -e` and `exit` never touch the caller's
    # shell), then export the DSN.
    if bash "${BASH_SOURCE[0]}"; then
        export CHAOS_PG_DSN="host=127.0.0.1 port=55432 dbname=chaosrun user=chaosrun"
        return 0
    else
        return $?
    fi
fi

set -euo pipefail

PORT=55432
DSN="host=127.0.0.1 port=$PORT dbname=chaosrun user=chaosrun"
PGDIR="${CHAOSRUN_PG_DIR:-/var/tmp/chaosrun-pg}"
DATA="$PGDIR/data"
LOG="$PGDIR/server.log"
PGUSER_SYS=chaosrun-pg

skip() {
    if [ -n "${started:-}" ]; then
        echo "CHAOS_PG_STARTED=$DATA"
    fi
    echo "SKIP: postgres unavailable: $*"
    exit 3
}

# As root the cluster's owner is $PGUSER_SYS; pg_ctl runs as the owner.
as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u "$PGUSER_SYS" -- "$@"; else "$@"; fi
}

find_bindir() {
    # The newest /usr/lib/postgresql/N/bin with initdb and pg_ctl, else $PATH.
    local d best=""
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
            best="$d"
        fi
    done
    if [ -z "$best" ] && command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        best="$(dirname "$(readlink -f "$(command -v pg_ctl)")")"
    fi
    echo "$best"
}

# The cluster's own major version's binaries, when installed (several
# versions may be); fails without them.
cluster_bindir() {
    local d
    d="/usr/lib/postgresql/$(cat "$DATA/PG_VERSION")/bin"
    [ -x "$d/pg_ctl" ] && echo "$d"
}

if [ "${1:-}" = stop ]; then
    # Nothing to stop without a cluster or a running server.
    [ -s "$DATA/PG_VERSION" ] || exit 0
    bin="$(cluster_bindir || find_bindir)"
    [ -n "$bin" ] || { echo "postgres.sh: no pg_ctl to stop $DATA with" >&2; exit 1; }
    as_owner "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1 || exit 0
    echo "postgres.sh: stopping postgres ($DATA)" >&2
    as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w stop >&2
    exit
fi

# Fast path: the server answers and the database exists.
if command -v psql >/dev/null 2>&1 \
    && PGCONNECT_TIMEOUT=2 psql "$DSN" -XAtqc 'SELECT 1' >/dev/null 2>&1; then
    echo "CHAOS_PG_DSN=$DSN"
    exit 0
fi

BIN="$(find_bindir)"
if [ -z "$BIN" ]; then
    if [ "$(id -u)" != 0 ]; then
        skip "initdb/pg_ctl not found and not root (cannot apt-get install postgresql)"
    fi
    command -v apt-get >/dev/null 2>&1 || skip "initdb/pg_ctl not found and no apt-get"
    echo "postgres.sh: installing postgresql with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y postgresql >&2; then
        apt-get update >&2 || skip "apt-get update failed"
        apt-get install -y postgresql >&2 || skip "apt-get install -y postgresql failed"
    fi
    BIN="$(find_bindir)"
    [ -n "$BIN" ] || skip "postgresql installed but no initdb/pg_ctl under /usr/lib/postgresql/*/bin"
fi

# Run a command as the cluster owner (root cannot own a cluster).
if [ "$(id -u)" = 0 ]; then
    if ! id -u "$PGUSER_SYS" >/dev/null 2>&1; then
        useradd -r -M -d "$PGDIR" -s /bin/sh "$PGUSER_SYS" 2>/dev/null \
            || id -u "$PGUSER_SYS" >/dev/null 2>&1 \
            || skip "cannot create system user $PGUSER_SYS"
    fi
    OWNER="$PGUSER_SYS"
else
    OWNER="$(id -un)"
fi

mkdir -p "$PGDIR" || skip "cannot create $PGDIR"
if [ "$(id -u)" = 0 ]; then
    chown "$OWNER" "$PGDIR"
fi
chmod 700 "$PGDIR"

# One setup at a time (parallel CI jobs on one machine).
exec 9>>"$PGDIR/.setup.lock"
flock -w 60 9 || skip "timed out waiting for $PGDIR/.setup.lock"

if [ ! -s "$DATA/PG_VERSION" ]; then
    rm -rf "$DATA"
    echo "postgres.sh: initdb $DATA" >&2
    as_owner "$BIN/initdb" -D "$DATA" -A trust -U chaosrun -E UTF8 --locale=C.UTF-8 --no-sync >&2 \
        || as_owner "$BIN/initdb" -D "$DATA" -A trust -U chaosrun -E UTF8 --locale=C --no-sync >&2 \
        || skip "initdb failed"
fi

# The cluster's major version picks the binaries when several are installed.
if own="$(cluster_bindir)"; then
    BIN="$own"
fi

ready() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -t 1 >/dev/null 2>&1; }

if ! as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    echo "postgres.sh: starting postgres on 127.0.0.1:$PORT" >&2
    touch "$LOG" && { [ "$(id -u)" != 0 ] || chown "$OWNER" "$LOG"; }
    if ! as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -W \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k $PGDIR" start >&2; then
        skip "pg_ctl start failed; see $LOG: $(tail -n 3 "$LOG" 2>/dev/null | tr '\n' ' ')"
    fi
    started=1
fi

deadline=$((SECONDS + 30))
until ready; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        skip "server not ready on 127.0.0.1:$PORT after 30 s; see $LOG: $(tail -n 3 "$LOG" 2>/dev/null | tr '\n' ' ')"
    fi
    sleep 0.2
done

admin="host=127.0.0.1 port=$PORT dbname=postgres user=chaosrun"
if [ "$("$BIN/psql" "$admin" -XAtqc "SELECT 1 FROM pg_database WHERE datname = 'chaosrun'")" != 1 ]; then
    "$BIN/psql" "$admin" -XAtqc "CREATE DATABASE chaosrun" >&2 \
        || [ "$("$BIN/psql" "$admin" -XAtqc "SELECT 1 FROM pg_database WHERE datname = 'chaosrun'")" = 1 ] \
        || skip "cannot create database chaosrun"
fi
"$BIN/psql" "$DSN" -XAtqc 'SELECT 1' >/dev/null 2>&1 \
    || skip "server runs but $DSN does not answer (another server on port $PORT?)"

if [ -n "${started:-}" ]; then
    echo "CHAOS_PG_STARTED=$DATA"
fi
echo "CHAOS_PG_DSN=$DSN"
