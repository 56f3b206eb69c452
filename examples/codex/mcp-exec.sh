#!/bin/sh
# Run codex with chaosrun's scripted MCP server registered for the row's
# transport, as `-c mcp_servers.chaos.*` overrides. Codex refuses a server
# entry holding both `command` and `url` ("url is not supported for stdio"),
# and chaosrun renders the transport a row does not use as "" (an empty key
# still counts), so config.toml cannot carry a fixed entry; a row without
# MCP gets no entry at all.
# usage: mcp-exec.sh TRANSPORT COMMAND ARGS_JSON URL TOOL_TIMEOUT CODEX ARG...
set -eu
transport=$1 command=$2 args=$3 url=$4 timeout=$5
shift 5
codex=$1
shift
case $transport in
    stdio) exec "$codex" -c "mcp_servers.chaos.command=\"$command\"" \
        -c "mcp_servers.chaos.args=$args" \
        -c "mcp_servers.chaos.tool_timeout_sec=$timeout" "$@" ;;
    http) exec "$codex" -c "mcp_servers.chaos.url=\"$url\"" \
        -c "mcp_servers.chaos.tool_timeout_sec=$timeout" "$@" ;;
    *) exec "$codex" "$@" ;;
esac
