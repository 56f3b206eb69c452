#!/bin/sh
# Print the JavaScript around a byte offset of Kilo CLI's Bun-compiled binary
# (the README cites code as `.kilo@OFFSET`): bundle-at.sh OFFSET [BYTES]
# The bundle is minified; each citation also names a string to grep for.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=$(readlink -f "$here/prefix/lib/node_modules/@kilocode/cli/bin/.kilo")
off=$1 n=${2:-600}
start=$((off > n ? off - n : 0))
dd if="$bin" bs=1 skip="$start" count=$((2 * n)) 2>/dev/null | tr -c '[:print:]\n' '?'
echo
