#!/bin/sh
# Install Claude Code 2.1.328 (pinned) into ./prefix, where claude-code.yaml runs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -L "$here/prefix" ] && rm "$here/prefix"
npm install -g --prefix "$here/prefix" @anthropic-ai/claude-code@2.1.328
DISABLE_AUTOUPDATER=1 "$here/prefix/bin/claude" --version
