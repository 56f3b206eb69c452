#!/bin/sh
# (Re)write the lock of each Node agent's pinned install: for every
# examples/AGENT/npm/package.json, a package-lock.json resolved by npm from
# the registry (no install, no scripts). Run it after changing a pin; the
# agents' setup.sh install exactly the lock.
#   scripts/npm-locks.sh [AGENT...]
set -eu
cd "$(dirname "$0")/.."
agents=${*:-$(for p in examples/*/npm/package.json; do basename "$(dirname "$(dirname "$p")")"; done)}
for a in $agents; do
    dir=examples/$a/npm
    [ -f "$dir/package.json" ] || { echo "npm-locks.sh: $dir/package.json is missing" >&2; exit 2; }
    rm -f "$dir/package-lock.json"
    (cd "$dir" && npm install --package-lock-only --ignore-scripts --no-audit --no-fund >/dev/null)
    echo "$dir/package-lock.json: $(grep -c '"node_modules/' "$dir/package-lock.json") packages"
done
