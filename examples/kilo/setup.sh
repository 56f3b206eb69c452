#!/bin/sh
# Install Kilo CLI 7.7.7 (pinned; 7.8.1 has no linux-x64 binary on npm) into ./prefix, where kilo.yaml runs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -L "$here/prefix" ] && rm "$here/prefix"
npm install -g --prefix "$here/prefix" @kilocode/cli@7.7.7
"$here/prefix/bin/kilo" --version
