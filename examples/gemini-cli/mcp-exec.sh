#!/bin/sh
# Run gemini with chaosrun's scripted MCP server registered for the row's
# transport: an `mcpServers.chaos` entry (stdio: command/args; Streamable HTTP:
# httpUrl) in a settings file under the scenario's HOME that
# GEMINI_CLI_SYSTEM_SETTINGS_PATH names (Gemini CLI merges it over
# ~/.gemini/settings.json). chaosrun renders the transport a row does not use
# as "" and a row without MCP renders every MCP variable empty; an entry with
# neither a command nor a URL makes Gemini CLI report a broken server, so a row
# without MCP gets no entry at all.
# usage: mcp-exec.sh TRANSPORT COMMAND ARGS_JSON URL TIMEOUT_MS GEMINI ARG...
set -eu
transport=$1 command=$2 args=$3 url=$4 timeout=$5
shift 5
settings="$HOME/.gemini/chaosrun-mcp-settings.json"
case $transport in
    stdio) entry="\"command\": \"$command\", \"args\": $args" ;;
    http) entry="\"httpUrl\": \"$url\"" ;;
    *) exec "$@" ;;
esac
mkdir -p "$HOME/.gemini"
printf '{"mcpServers": {"chaos": {%s, "timeout": %s, "trust": true}}}\n' "$entry" "$timeout" > "$settings"
GEMINI_CLI_SYSTEM_SETTINGS_PATH=$settings exec "$@"
