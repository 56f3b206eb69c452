#!/bin/sh
# Run claude with chaosrun's scripted MCP server registered for the row's
# transport, as `--mcp-config JSON --strict-mcp-config` (stdio: command/args;
# Streamable HTTP: type "http", url). chaosrun renders the transport a row does
# not use as "" and a row without MCP renders every MCP variable empty, so a
# fixed config file would register a server with an empty command; a row
# without MCP gets no --mcp-config at all.
# usage: mcp-exec.sh TRANSPORT COMMAND ARGS_JSON URL CLAUDE ARG...
set -eu
transport=$1 command=$2 args=$3 url=$4
shift 4
claude=$1
shift
case $transport in
    stdio) exec "$claude" --strict-mcp-config --mcp-config \
        "{\"mcpServers\": {\"chaos\": {\"type\": \"stdio\", \"command\": \"$command\", \"args\": $args}}}" "$@" ;;
    http) exec "$claude" --strict-mcp-config --mcp-config \
        "{\"mcpServers\": {\"chaos\": {\"type\": \"http\", \"url\": \"$url\"}}}" "$@" ;;
    *) exec "$claude" "$@" ;;
esac
