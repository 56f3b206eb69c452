#!/bin/sh
# Runs opencode with the scenario's MCP server registered (or none):
#   oc-exec.sh TRANSPORT MCP_COMMAND MCP_ARGS_JSON MCP_URL OPENCODE ARGS...
# TRANSPORT is chaosrun's {{mcp_transport}}: `stdio` registers a `local`
# server (command + args), `http` a `remote` one (Streamable HTTP), anything
# else (a row without `mcp:`) none. The entry goes in through
# OPENCODE_CONFIG_CONTENT, opencode's inline config (merged last); the rest of
# the config is ~/.config/opencode/opencode.json. Then exec: no shell stays.
set -eu
transport=$1 cmd=$2 args=$3 url=$4
shift 4
case "$transport" in
stdio)
    rest=${args#\[}
    case "$rest" in
    "]") list="[\"$cmd\"]" ;;
    *) list="[\"$cmd\",$rest" ;;
    esac
    OPENCODE_CONFIG_CONTENT="{\"mcp\":{\"chaos\":{\"type\":\"local\",\"command\":$list,\"enabled\":true}}}"
    export OPENCODE_CONFIG_CONTENT ;;
http)
    OPENCODE_CONFIG_CONTENT="{\"mcp\":{\"chaos\":{\"type\":\"remote\",\"url\":\"$url\",\"enabled\":true,\"oauth\":false}}}"
    export OPENCODE_CONFIG_CONTENT ;;
esac
exec "$@"
