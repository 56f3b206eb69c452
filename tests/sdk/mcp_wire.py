"""The MCP server against an independent client: the official Python `mcp`
SDK (pinned in scripts/sdk_venv.sh) talks to `chaosrun serve --mcp` over
stdio (spawning `chaosrun mcp-stdio --socket PATH`, as an agent would) and
over Streamable HTTP, and gets each reply kind. Each case asserts what the
SDK saw (a result, an error, a timeout, progress, notifications, a dead
connection), then the server's recording is checked: every case's request
arrived and was answered by the kind it names.

Usage: python mcp_wire.py PATH_TO_CHAOSRUN. Prints one line per case and
`N passed, M failed` last; exits 1 on any failure.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
from datetime import timedelta

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

BIN = sys.argv[1]

# One rule per tools/call index, in the order of CASES below.
RULES = """rules:
  - {when: {call: 0}, reply: {kind: result}}
  - {when: {call: 1}, reply: {kind: result, text: 'bad {{nonce}}', is_error: true, structured: {n: 1}}}
  - {when: {call: 2}, reply: {kind: jsonrpc_error, code: -32001, message: 'scripted {{nonce}}'}}
  - {when: {call: 3}, reply: {kind: slow, seconds: 0.3}}
  - {when: {call: 4}, reply: {kind: list_changed_storm, count: 3, interval: 0.01}}
  - {when: {call: 5}, reply: {kind: huge, bytes: 3000000}}
  - {when: {call: 6}, reply: {kind: progress_forever, interval: 0.05}}
  - {when: {call: 7}, reply: {kind: hang}}
  - {when: {call: 8}, reply: {kind: malformed}}
  - {when: {call: 9}, reply: {kind: crash, after: 0.1}}
"""
LIST_HANG = "rules: [{when: {method: tools/list}, reply: {kind: list_hang}}]\n"
KINDS = ["result", "result", "jsonrpc_error", "slow", "list_changed_storm", "huge",
         "progress_forever", "hang", "malformed", "crash"]


class Server:
    def __init__(self, rules):
        self.dir = tempfile.TemporaryDirectory()
        path = os.path.join(self.dir.name, "rules.yaml")
        with open(path, "w") as f:
            f.write(rules)
        self.proc = subprocess.Popen([BIN, "serve", "--mcp", path, "--nonce", "N0NCE"],
                                     stdout=subprocess.PIPE, text=True)
        words = self.proc.stdout.readline().split()
        assert words[:3] == ["chaosrun", "MCP", "server:"], words
        self.socket, self.url = words[4], words[6]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=20)
        assert self.proc.returncode == 0, self.proc.returncode
        return json.loads(out.strip().splitlines()[-1])


class Seen:
    """What the session's message handler saw."""

    def __init__(self):
        self.list_changed = 0
        self.errors = []

    async def handler(self, message):
        if isinstance(message, Exception):
            self.errors.append(message)
            return
        name = type(getattr(message, "root", message)).__name__
        if "ToolListChanged" in name:
            self.list_changed += 1


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def fails(coro, within):
    """The awaitable raises (an MCP error, a timeout, a closed connection)
    within `within` seconds; returns the exception."""
    with anyio.fail_after(within):
        try:
            await coro
        except Exception as e:  # noqa: BLE001 - any failure is what we want here
            return e
    raise AssertionError("it returned a result")


async def case_result(s, seen, transport):
    r = await s.call_tool("probe", {"text": "hello"})
    assert text_of(r) == "probe:hello" and not r.is_error, r


async def case_is_error(s, seen, transport):
    r = await s.call_tool("probe", {"text": "x"})
    assert r.is_error and text_of(r) == "bad N0NCE", r
    assert r.structured_content == {"n": 1}, r.structured_content


async def case_jsonrpc_error(s, seen, transport):
    e = await fails(s.call_tool("probe", {"text": "x"}), 10)
    code = getattr(getattr(e, "error", None), "code", None)
    assert code == -32001 or "scripted N0NCE" in str(e), repr(e)


async def case_slow(s, seen, transport):
    t = anyio.current_time()
    r = await s.call_tool("probe", {"text": "s"})
    assert text_of(r) == "probe:s" and anyio.current_time() - t >= 0.3


async def case_storm(s, seen, transport):
    r = await s.call_tool("probe", {"text": "storm"})
    assert text_of(r) == "probe:storm"
    with anyio.fail_after(5):
        while seen.list_changed < 3:
            await anyio.sleep(0.02)


# The legacy SSE client caps one event at 1 MiB and takes no other cap, so
# its `huge` is 500 KB (a bigger one ends its session: the SDK's limit).
HUGE = {"stdio": 3_000_000, "http": 3_000_000, "sse": 500_000}


async def case_huge(s, seen, transport):
    r = await s.call_tool("probe", {"text": "h"})
    t = text_of(r)
    assert t.startswith("probe:h:xxx") and len(t) >= HUGE[transport], len(t)


async def case_progress(s, seen, transport):
    got = []

    async def on_progress(progress, total, message):
        got.append(progress)

    await fails(s.call_tool("probe", {"text": "p"}, read_timeout_seconds=1.0,
                            progress_callback=on_progress), 10)
    assert len(got) >= 3 and got[:3] == [1, 2, 3], got


async def case_hang(s, seen, transport):
    e = await fails(s.call_tool("probe", {"text": "h"}, read_timeout_seconds=0.5), 10)
    assert "tim" in str(e).lower() or "timeout" in type(e).__name__.lower(), repr(e)


async def case_malformed(s, seen, transport):
    before = len(seen.errors)
    await fails(s.call_tool("probe", {"text": "m"}, read_timeout_seconds=1.0), 10)
    if transport == "stdio":
        assert len(seen.errors) > before, "the unparseable line was not surfaced"


async def case_crash(s, seen, transport):
    await fails(s.call_tool("probe", {"text": "c"}, read_timeout_seconds=10.0), 15)


CASES = [
    ("result", case_result), ("result is_error", case_is_error), ("jsonrpc_error", case_jsonrpc_error),
    ("slow", case_slow), ("list_changed_storm", case_storm), ("huge", case_huge),
    ("progress_forever", case_progress), ("hang", case_hang), ("malformed", case_malformed),
    ("crash", case_crash),
]

passed, failed = 0, 0


def report(ok, what, why=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok    {what}", flush=True)
    else:
        failed += 1
        print(f"FAIL  {what}: {why}", flush=True)


def transport(kind, server):
    if kind == "stdio":
        return stdio_client(StdioServerParameters(command=BIN, args=["mcp-stdio", "--socket", server.socket]))
    if kind == "sse":
        # The legacy HTTP+SSE transport, on the same listener.
        return sse_client(server.url.removesuffix("/mcp") + "/sse")
    # The SDK caps one SSE event at 1 MiB by default; `huge` is 3 MB.
    return streamable_http_client(server.url, max_sse_event_size=None)


async def session_cases(kind, server):
    seen = Seen()
    async with transport(kind, server) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, message_handler=seen.handler) as s:
            init = await s.initialize()
            report(init.protocol_version in ("2025-06-18", "2025-03-26"), f"{kind} initialize",
                   init.protocol_version)
            tools = await s.list_tools()
            report([t.name for t in tools.tools] == ["probe"], f"{kind} tools/list", tools)
            for name, case in CASES:
                try:
                    await case(s, seen, kind)
                    report(True, f"{kind} {name}")
                except BaseException as e:  # noqa: BLE001
                    report(False, f"{kind} {name}", repr(e))


async def list_hang(kind):
    server = Server(LIST_HANG)
    try:
        async with transport(kind, server) as streams:
            async with ClientSession(streams[0], streams[1], read_timeout_seconds=1.0) as s:
                await s.initialize()
                e = await fails(s.list_tools(), 10)
                report(True, f"{kind} list_hang ({type(e).__name__})")
    except BaseException as e:  # noqa: BLE001
        report(False, f"{kind} list_hang", repr(e))
    rec = server.stop()
    kinds = [x.get("kind") for x in rec["exchanges"] if x["method"] == "tools/list"]
    report(kinds[:1] == ["list_hang"], f"{kind} list_hang recorded", kinds)


async def main():
    for kind in ("stdio", "http", "sse"):
        server = Server(RULES.replace("bytes: 3000000", f"bytes: {HUGE[kind]}"))
        try:
            await session_cases(kind, server)
        except BaseException as e:  # noqa: BLE001 - the crash may end the session
            print(f"note  {kind} session ended: {e!r}", flush=True)
        rec = server.stop()
        calls = [x for x in rec["exchanges"] if x["method"] == "tools/call"]
        report([c["kind"] for c in calls] == KINDS, f"{kind} recording: every kind answered in order",
               [c["kind"] for c in calls])
        report(any(x["method"] == "notifications/initialized" for x in rec["exchanges"]),
               f"{kind} recording: notifications/initialized")
        await list_hang(kind)
    print(f"{passed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed else 0)


anyio.run(main)
