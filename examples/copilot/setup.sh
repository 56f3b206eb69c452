#!/bin/sh
# Install GitHub Copilot CLI 1.0.102 (npm @github/copilot, pinned) into ./prefix,
# where copilot.yaml runs it, and extract its JS package once into
# ./prefix/pkgcache (COPILOT_PKG_CACHE_HOME in the profile): the native
# launcher otherwise unpacks 235 MB into every scenario's fresh HOME (8 s).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -L "$here/prefix" ] && rm "$here/prefix"
npm install -g --prefix "$here/prefix" @github/copilot@1.0.102
COPILOT_SEA_EXTRACT_ONLY=1 COPILOT_PKG_CACHE_HOME="$here/prefix/pkgcache" "$here/prefix/bin/copilot"
test -f "$here/prefix/pkgcache/pkg/linux-x64/1.0.102/index.js"
"$here/prefix/bin/copilot" --version
