#!/bin/sh
# Install opencode 1.18.33 (pinned) into ./prefix, where opencode.yaml runs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -L "$here/prefix" ] && rm "$here/prefix"
npm install -g --prefix "$here/prefix" opencode-ai@1.18.33
"$here/prefix/bin/opencode" --version
