#!/bin/sh
# Run gemini with chaosrun's scripted MCP server registered for the row's
# transport: an `mcpServers.chaos` entry (stdio: command/args; Streamable HTTP:
# httpUrl) merged into the user settings, $HOME/.gemini/settings.json (the
# profile's home_files render it). Not a system settings file
# (GEMINI_CLI_SYSTEM_SETTINGS_PATH): Gemini CLI skips one whose parent
# directories are writable by others (`loadSystemFile`,
# bundle/chunk-2YTYPKEZ.js:16598-16611), and the scenario's HOME lives under
# the temp dir (/tmp is mode 1777), so the server was never registered. The
# user settings are loaded without that check (`load(USER_SETTINGS_PATH)`,
# :16618). chaosrun renders the transport a row does not use as "" and a row
# without MCP renders every MCP variable empty; an entry with neither a
# command nor a URL makes Gemini CLI report a broken server, so a row without
# MCP gets no entry at all.
# usage: mcp-exec.sh TRANSPORT COMMAND ARGS_JSON URL TIMEOUT_MS GEMINI ARG...
set -eu
transport=$1 command=$2 args=$3 url=$4 timeout=$5
shift 5
case $transport in
    stdio) entry="{\"command\": \"$command\", \"args\": $args, \"timeout\": $timeout, \"trust\": true}" ;;
    http) entry="{\"httpUrl\": \"$url\", \"timeout\": $timeout, \"trust\": true}" ;;
    *) exec "$@" ;;
esac
# node runs gemini itself, so it is on PATH wherever gemini runs.
node -e '
const fs = require("fs");
const [path, entry] = process.argv.slice(1);
const s = JSON.parse(fs.readFileSync(path, "utf8"));
s.mcpServers = { chaos: JSON.parse(entry) };
fs.writeFileSync(path, JSON.stringify(s, null, 1) + "\n");
' "$HOME/.gemini/settings.json" "$entry"
exec "$@"
