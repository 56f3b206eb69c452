#!/bin/sh
# Install Gemini CLI 0.61.0 (pinned) into ./prefix, where gemini-cli.yaml runs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -L "$here/prefix" ] && rm "$here/prefix"
npm install -g --prefix "$here/prefix" @google/gemini-cli@0.61.0
"$here/prefix/bin/gemini" --version
