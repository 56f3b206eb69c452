#!/bin/sh
# Runs Kilo CLI with the scenario's MCP server registered (or none):
#   kilo-exec.sh TRANSPORT MCP_COMMAND MCP_ARGS_JSON MCP_URL KILO ARGS...
# TRANSPORT is chaosrun's {{mcp_transport}}: `stdio` registers a `local`
# server (command + args), `http` a `remote` one (Streamable HTTP), anything
# else (a row without `mcp:`) none. The entry goes in through
# KILO_CONFIG_CONTENT, kilo's inline config (merged last); the rest of
# the config is ~/.config/kilo/kilo.json. Then exec: no shell stays.
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
    KILO_CONFIG_CONTENT="{\"mcp\":{\"chaos\":{\"type\":\"local\",\"command\":$list,\"enabled\":true}}}"
    export KILO_CONFIG_CONTENT ;;
http)
    KILO_CONFIG_CONTENT="{\"mcp\":{\"chaos\":{\"type\":\"remote\",\"url\":\"$url\",\"enabled\":true,\"oauth\":false}}}"
    export KILO_CONFIG_CONTENT ;;
esac
exec "$@"
