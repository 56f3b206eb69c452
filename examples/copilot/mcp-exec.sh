#!/bin/sh
# Run copilot with chaosrun's scripted MCP server registered for the row's
# transport, as `--additional-mcp-config JSON`: {"mcpServers": {"chaos":
# {"type": "local", command, args}}} (stdio) or {"type": "http", url}
# (Streamable HTTP). chaosrun renders the transport a row does not use as ""
# (and a row without MCP renders both empty), so one fixed config entry cannot
# serve every row: a row without MCP gets no entry at all. MCP_EXEC_TIMEOUT_MS
# (the profile renders the row's tool_timeout there, in ms) becomes the
# server's `timeout` (`copilot mcp add --timeout <ms>`), when set.
# usage: mcp-exec.sh TRANSPORT COMMAND ARGS_JSON URL COPILOT ARG...
set -eu
transport=$1 command=$2 args=$3 url=$4
shift 4
copilot=$1
shift
timeout=${MCP_EXEC_TIMEOUT_MS:+", \"timeout\": $MCP_EXEC_TIMEOUT_MS"}
case $transport in
    stdio) exec "$copilot" --additional-mcp-config \
        "{\"mcpServers\": {\"chaos\": {\"type\": \"local\", \"command\": \"$command\", \"args\": $args, \"tools\": [\"*\"]$timeout}}}" "$@" ;;
    http) exec "$copilot" --additional-mcp-config \
        "{\"mcpServers\": {\"chaos\": {\"type\": \"http\", \"url\": \"$url\", \"tools\": [\"*\"]$timeout}}}" "$@" ;;
    *) exec "$copilot" "$@" ;;
esac
