#!/usr/bin/env python3
"""A one-shot CLI agent built on pydantic-ai 2.62.0, the thinnest one a user writes.

    agent.py --session ID MESSAGE

One turn per process (chaosrun's exec mode): load the session's history,
``agent.run(MESSAGE, message_history=...)`` with one shell tool, append the
run's new messages to the history, print JSON lines and exit. Everything that
decides liveness is pydantic-ai's own, configured the way its docs say:

* model: ``OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=..., api_key=...))``;
* ``ModelSettings(timeout=STALE, max_retries=RETRIES)``: ``timeout`` is the
  OpenAI SDK's per-attempt httpx timeout (on a stream, the wait for each
  chunk), ``max_retries`` the SDK's retry count. ``request_timeout`` (a
  whole-request deadline, streaming included) is NOT set: it would cut a
  healthy slow stream; chaosrun's request_timeout bounds only the headers;
* ``UsageLimits(request_limit=MAX_TURNS)``: model requests per run;
* streaming through ``event_stream_handler`` (tool events printed as they happen).

The tool ``run_shell(command, timeout, background)`` is ordinary user code:
``bash -c`` in its own session, stdin from /dev/null, output capped, the
process group killed on timeout or cancellation; ``background`` starts it
with Popen and does not wait.

MCP: ``$HOME/.pyagent/mcp.json`` (when present) is an ``mcpServers`` config
loaded with pydantic-ai's own ``load_mcp_toolsets`` (one ``MCPToolset`` per
server, its tools prefixed ``<server>_``); an entry's empty ``command`` or
``url`` counts as unset (chaosrun renders the transport a row does not use
as ``""``), and an entry with neither is left out.

History: ``$HOME/.pyagent/sessions/ID.jsonl``, one pydantic-ai ``ModelMessage``
per line (``to_jsonable_python``), read back with ``ModelMessagesTypeAdapter``.
Rewritten whole when the run ends, however it ends: the messages come from
``capture_run_messages()``, which pydantic-ai documents for runs that raise
(a run cut off mid-stream or mid-tool leaves its partial message marked
``state='interrupted'``; the next run's history repair answers its dangling
calls). A SIGKILL saves nothing of the turn it cut.

Config from the environment: PYAGENT_BASE_URL, PYAGENT_MODEL,
PYAGENT_STALE_TIMEOUT, PYAGENT_MAX_RETRIES, PYAGENT_MAX_TURNS,
PYAGENT_TOOL_TIMEOUT. Exit 0 on an answer, 1 on an error, 130 on SIGINT.
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from pydantic_ai import Agent, capture_run_messages
from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessagesTypeAdapter,
)
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import UsageLimits
from pydantic_core import to_jsonable_python

OUTPUT_CAP = 50_000


def emit(**rec):
    print(json.dumps(rec), flush=True)


def env_num(name, default):
    v = os.environ.get(name, "")
    return float(v) if v else default


TOOL_TIMEOUT = env_num("PYAGENT_TOOL_TIMEOUT", 120.0)


def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def run_shell(command: str, timeout: float | None = None, background: bool = False) -> str:
    """Run a bash command in the working directory and return its output.

    Args:
        command: the bash command line.
        timeout: seconds before the command is killed (default: the agent's tool timeout).
        background: start it and return at once with its pid, without waiting.
    """
    if background:
        p = subprocess.Popen(
            ["bash", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return json.dumps({"started": True, "pid": p.pid})
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout or TOOL_TIMEOUT)
    except asyncio.TimeoutError:
        kill_group(proc.pid)
        await proc.wait()
        return f"timed out after {timeout or TOOL_TIMEOUT} s; killed"
    except BaseException:
        kill_group(proc.pid)
        raise
    kill_group(proc.pid)  # anything it left in its group goes with it
    text = out.decode(errors="replace")
    if len(text) > OUTPUT_CAP:
        text = text[:OUTPUT_CAP] + f"\n[... {len(text) - OUTPUT_CAP} more characters cut]"
    return f"exit code {proc.returncode}\n{text}"


def history_path(session):
    d = Path(os.environ["HOME"]) / ".pyagent" / "sessions"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{session}.jsonl"


def load(path):
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return ModelMessagesTypeAdapter.validate_python(rows)


def save(path, messages):
    """Rewrite the session's history whole (temp file, then rename)."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        for m in messages:
            f.write(json.dumps(to_jsonable_python(m)) + "\n")
    os.replace(tmp, path)


def mcp_toolsets():
    """The servers of ``$HOME/.pyagent/mcp.json``, through pydantic-ai's loader."""
    path = Path(os.environ["HOME"]) / ".pyagent" / "mcp.json"
    if not path.exists():
        return []
    config = json.loads(path.read_text())
    servers = {}
    for name, entry in config.get("mcpServers", {}).items():
        entry = {k: v for k, v in entry.items() if v not in ("", None)}
        if entry.get("command"):
            entry.pop("url", None)
            servers[name] = entry
        elif entry.get("url"):
            entry.pop("args", None)
            servers[name] = entry
    if not servers:
        return []
    cleaned = path.with_name("mcp.loaded.json")
    cleaned.write_text(json.dumps({"mcpServers": servers}))
    # Imported here: FastMCP is a heavy import, and a run without a server
    # should not pay for it at start-up.
    from pydantic_ai.mcp import load_mcp_toolsets

    return load_mcp_toolsets(cleaned)


async def on_events(ctx, events):
    async for ev in events:
        if isinstance(ev, FunctionToolCallEvent):
            emit(type="tool_call", id=ev.part.tool_call_id, name=ev.part.tool_name, args=ev.part.args)
        elif isinstance(ev, FunctionToolResultEvent):
            emit(type="tool_result", id=ev.tool_call_id, content=str(getattr(ev.part, "content", ""))[:2000])


async def main(session, message):
    model = OpenAIChatModel(
        os.environ.get("PYAGENT_MODEL", "gpt-4o"),
        provider=OpenAIProvider(base_url=os.environ["PYAGENT_BASE_URL"], api_key="k"),
    )
    settings = ModelSettings()
    if "PYAGENT_STALE_TIMEOUT" in os.environ:
        settings["timeout"] = env_num("PYAGENT_STALE_TIMEOUT", 0)
    if "PYAGENT_MAX_RETRIES" in os.environ:
        settings["max_retries"] = int(env_num("PYAGENT_MAX_RETRIES", 2))
    agent = Agent(
        model,
        instructions="You are a coding agent. Use run_shell to run commands.",
        tools=[run_shell],
        toolsets=mcp_toolsets(),
        model_settings=settings,
    )
    path = history_path(session)
    history = load(path)
    limits = UsageLimits(request_limit=int(env_num("PYAGENT_MAX_TURNS", 50)))
    # capture_run_messages is pydantic-ai's documented way to get a run's
    # messages when it raises (history + what the run added, a cut-off part
    # marked state='interrupted'); the history is saved whatever the outcome.
    with capture_run_messages() as messages:
        try:
            result = await agent.run(
                message, message_history=history, usage_limits=limits, event_stream_handler=on_events
            )
        finally:
            save(path, messages)
    return result.output


def cli():
    args = sys.argv[1:]
    if len(args) != 3 or args[0] != "--session":
        print("usage: agent.py --session ID MESSAGE", file=sys.stderr)
        return 2
    session, message = args[1], args[2]
    try:
        output = asyncio.run(main(session, message))
    except KeyboardInterrupt:
        emit(type="result", is_error=True, error="interrupted")
        return 130
    except Exception as e:  # the turn failed: say why on the result line
        emit(type="result", is_error=True, error=f"{type(e).__name__}: {e}")
        return 1
    emit(type="result", is_error=False, result=output)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
