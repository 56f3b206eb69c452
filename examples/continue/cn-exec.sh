#!/bin/sh
# Run Continue CLI (`cn -p`) on a config file written here, in the
# scenario's HOME: one OpenAI-compatible model pointed at chaosrun's
# provider (and a second entry on the same provider with the `subagent` role
# and a system message, which is what makes a model a subagent the
# `Subagent` tool can start: src/services/ModelService.ts:309-317), and chaosrun's scripted MCP server registered as `chaos` for the
# row's transport (`command`/`args` for stdio, `type: streamable-http` with
# `url` for Streamable HTTP). chaosrun renders the transport a row does not
# use as "" (a row without MCP renders both empty), so the entry is written
# only for the row's transport and a row without MCP gets no `mcpServers`.
# TIMEOUT_MS is the row's request_timeout in milliseconds, written as each
# model's `requestOptions.timeout`: the adapter hands it to the OpenAI SDK,
# whose unit is ms (packages/openai-adapters/src/apis/OpenAI.ts:48; the SDK's
# default 600000, openai/src/client.ts:382).
# usage: cn-exec.sh TRANSPORT COMMAND ARGS_JSON URL BASE_URL MODEL API_KEY TIMEOUT_MS CN ARG...
set -eu
transport=$1 command=$2 args=$3 url=$4 base_url=$5 model=$6 api_key=$7 timeout_ms=$8
shift 8
config="$HOME/.continue/chaos-config.yaml"
mkdir -p "$HOME/.continue"
cat > "$config" <<YAML
name: chaosrun
version: 1.0.0
schema: v1
models:
  - name: chaos
    provider: openai
    model: "$model"
    apiKey: "$api_key"
    apiBase: "$base_url"
    requestOptions: {timeout: $timeout_ms}
    roles: [chat]
  - name: chaos-sub
    provider: openai
    model: "$model"
    apiKey: "$api_key"
    apiBase: "$base_url"
    requestOptions: {timeout: $timeout_ms}
    roles: [subagent]
    chatOptions:
      baseSystemMessage: "A general-purpose subagent: carry out the task it is given."
YAML
case $transport in
    stdio) printf 'mcpServers:\n  - name: chaos\n    command: "%s"\n    args: %s\n' "$command" "$args" >> "$config" ;;
    http) printf 'mcpServers:\n  - name: chaos\n    type: streamable-http\n    url: "%s"\n' "$url" >> "$config" ;;
esac
cn=$1
shift
# In -p mode cn prints its answer on stdout ({"response": ..., "status":
# "success"} with --format json, src/commands/chat.ts:44-60,203-218) but a
# failed turn's {"status": "error", "message": ...} on stderr
# (src/commands/chat.ts:620-627): both onto stdout, where the profile's
# `final` reads either.
exec "$cn" --config "$config" "$@" 2>&1
