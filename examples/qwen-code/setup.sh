#!/bin/sh
# Install qwen-code 0.24.4 (pinned) into ./prefix, where qwen-code.yaml runs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -L "$here/prefix" ] && rm "$here/prefix"
npm install -g --prefix "$here/prefix" @qwen-code/qwen-code@0.24.4
"$here/prefix/bin/qwen" --version
