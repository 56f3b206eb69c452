#!/bin/sh
# Install pi 0.73.1 (npm @mariozechner/pi-coding-agent, pinned) into ./prefix, where pi.yaml runs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -L "$here/prefix" ] && rm "$here/prefix"
npm install -g --prefix "$here/prefix" @mariozechner/pi-coding-agent@0.73.1
PI_OFFLINE=1 "$here/prefix/bin/pi" --version
