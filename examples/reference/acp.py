"""The reference agent's ACP mode (Agent Client Protocol v1; Python 3.11, stdlib only).

``agent.py --acp [--wire W] [--bug NAME]... [--engine-child] [--spill-tool-output[=N]]``
makes the reference agent an ACP agent: the client (chaosrun's ACP drive, an
editor) starts it and speaks newline-delimited JSON-RPC 2.0 on its stdin and
stdout. stdout carries only JSON-RPC frames (fd 1 is pointed at stderr, so a
stray write can never corrupt the stream); stderr is the agent's log. No spec
file: the session comes from ``session/new`` or ``session/load``, the turns
from ``session/prompt``. This module owns the protocol side; the agent loop is
agent.py's ``Agent``, subclassed here only to report what it does.

Methods served
  * ``initialize`` -> protocolVersion 1, ``agentCapabilities`` (``loadSession``,
    ``mcpCapabilities.http`` and ``.sse``, ``sessionCapabilities.close``), ``authMethods: []``.
  * ``session/new {cwd, mcpServers}`` -> ``{sessionId: "sess_<hex>"}``: an
    ``Agent`` whose session id (the store's ``session_id``) is that id and whose
    workdir is ``cwd``; config from ``$HOME/.refagent/config.json`` as in driver
    mode. ``mcpServers`` (stdio ``{name, command, args, env: [{name, value}]}``
    or http ``{type: "http", name, url}`` or sse ``{type: "sse", name, url}``) are added to the config's
    ``mcp_servers``, replacing a configured server of the same name.
  * ``session/load {sessionId, cwd, mcpServers}`` -> an ``Agent`` resumed on
    that session (stale jobs killed, history repaired, as after a restart in
    driver mode); its stored history is replayed as ``user_message_chunk`` /
    ``agent_message_chunk`` updates, then the answer ``null``.
  * ``session/prompt {sessionId, prompt}`` -> the turn runs in a worker thread
    while stdin is still read. Tool calls are reported as ``tool_call``
    (``pending``, with title, kind and rawInput) when the model asks for them,
    ``tool_call_update`` ``in_progress`` when each starts, then ``completed``,
    ``failed``, or ``cancelled`` (the turn was cancelled). Assistant text goes
    out as ``agent_message_chunk`` as it is stored. The answer is
    ``{stopReason}``: ``end_turn``, ``cancelled``, ``max_turn_requests``; a
    failed turn is the JSON-RPC error -32603 with the turn's final text. A
    prompt sent while one runs is queued and served after it, in order.
  * ``session/cancel`` (notification) -> the running turn's interrupt.
  * ``session/close {sessionId}`` -> the running turn cancelled, queued prompts
    answered ``cancelled``, the Agent closed (jobs and descendants killed, store
    closed) and the answer ``{}``.
  * stdin closed -> every session closed, exit 0. Anything else asked -> -32601.

ACP bugs (``--bug NAME``, listed in agent.py's KNOWN_BUGS), each one change:
  * ``acp_tool_left_in_progress``: a tool call that completed never gets its
    ``completed`` update: its last update stays ``in_progress``.
  * ``acp_update_after_cancel``: right after answering a prompt ``cancelled``
    it sends one more ``agent_message_chunk`` (the spec wants every update
    before the answer).
  * ``acp_cancel_leaves_job``: a cancel ends the turn ``cancelled`` at once but
    the running shell command is left running, not killed.
  * ``acp_subagent_ignores_cancel``: a cancel stops the parent but a running
    ``task`` subagent is never told; it goes on with its model calls.
  * ``acp_cancel_before_call_breaks``: a cancel that lands before the turn's
    first model call is answered (made or not) is answered ``cancelled``, but
    the session stays busy: every later prompt is answered at once "Queued
    for the next turn." and never run (Hermes 0.19.0, there only before the
    call is made; here also during it, so that the row's cancel, which may
    race the call, always finds the bug).
  * ``acp_queued_prompt_dropped``: a ``session/prompt`` that arrives while a
    turn runs is dropped: never answered, never run (copilot-cli #3184).
  * ``acp_answer_off_by_one``: after a cancelled prompt, each prompt is
    answered with the previous turn's answer text, its own held back for the
    next (claude-agent-acp 0.23.1).
  * ``acp_tool_unreported``: a tool call is shown only once it succeeded; one
    that fails (an error, a non-zero exit) sends no ``tool_call`` update at all
    (codex-acp 0.16.0 in read-only mode without bwrap).
  * ``acp_no_exit_on_eof``: stdin closed closes the sessions but the process
    does not exit; only a signal ends it (the Claude adapters, codex-acp).
  * ``acp_permission_unsettled``: a permission request answered ``cancelled``
    is ignored: the agent waits on it until the session closes.
  * ``acp_terminal_no_timeout``: a command run in the client's terminal is
    waited on (``terminal/wait_for_exit``) with no tool timeout: only a
    cancel ends the wait.
  * ``acp_terminal_never_released``: the client's terminal is never
    released (``terminal/release``) once its command ended or was killed.

Permission: a shell command whose text holds ``ASK_PERMISSION`` is first put
to the client as ``session/request_permission`` (options ``allow_once``,
``reject_once``): run when allowed, refused (``error: permission denied``)
when rejected, ended as cancelled when the outcome is ``cancelled``; a cancel
while no answer came yet stops the wait after ``PERMISSION_GRACE`` s.
  * ``acp_load_drops_last_turn``: ``session/load`` replays the conversation
    without its last answered turn.
  * ``acp_queue_lost_on_kill``: a prompt queued while a turn runs is persisted
    at once (a file beside the store); after a kill, ``session/load`` replays
    it as a user message, and when the client sends it again it is taken for
    that kept copy ("already queued"): answered ``end_turn`` with nothing said,
    never run, never shown as failed (copilot-cli #3184).

Client tools: a shell command whose text holds ``VIA_TERMINAL`` runs in the
client's terminal: ``terminal/create`` (``sh -c COMMAND``), ``wait_for_exit``
bounded by the tool timeout (on timeout ``terminal/kill``; the result is
"error: command timed out after Ns (terminal killed)" and the output so far),
``terminal/output``, ``terminal/release``; on a cancel the terminal is killed
and released. A ``terminal/create`` answered after the tool timeout or a
cancel is still waited for ``CREATE_GRACE`` s, and the terminal it made killed
and released (an editor keeps an unreleased terminal). A shell command ``cat VIA_CLIENT_FS:PATH`` (PATH relative to the
work dir, or absolute) is read through ``fs/read_text_file`` instead, bounded
by the same timeout ("error: fs/read_text_file: no answer in Ns"). The
``write_file`` tool writes through the client: ``fs/read_text_file`` of the
path first (as Gemini CLI does; a missing file's ``-32002`` "Resource not
found" means a new file, any other error fails the tool), then
``fs/write_text_file {path, content}`` (the path absolute, in the work dir),
each bounded by the tool timeout.
  * ``acp_write_new_file_fails``: any error of that first read fails the tool,
    the missing file's ``-32002`` included: a new file is never written
    (Gemini CLI 0.61.0).
"""

import copy
import ctypes
import json
import os
import re
import secrets
import signal
import sys
import threading
import time
import traceback
from collections import deque

PROTOCOL_VERSION = 1
AGENT_INFO = {"name": "chaosrun-refagent", "version": "1.0"}
CONTENT_CAP = 10_000        # chars of a tool's output put in its final update
RAW_INPUT_CAP = 2_000       # chars of unparseable tool arguments put in rawInput
MAX_LINE = 64_000_000       # bytes of one incoming frame kept; a longer one is refused
PARSE_ERROR, INVALID_REQUEST, NO_METHOD, BAD_PARAMS, INTERNAL = -32700, -32600, -32601, -32602, -32603
RESOURCE_NOT_FOUND = -32002  # ACP: the file asked for does not exist
PERMISSION_MARKER = "ASK_PERMISSION"
TERMINAL_MARKER = "VIA_TERMINAL"   # a shell command holding it runs in the client's terminal
FS_MARKER = "VIA_CLIENT_FS:"       # `cat VIA_CLIENT_FS:PATH` reads PATH through fs/read_text_file
PERMISSION_GRACE = 2.0      # s a cancelled turn still waits for its permission answer
CREATE_GRACE = 5.0          # s a tool that stopped waiting for terminal/create still waits to release it
LATE_CHUNK = "(late) the cancelled turn is still talking (bug acp_update_after_cancel)"


class Frames:
    """Writes JSON-RPC frames, one per line, to the client (thread-safe)."""

    def __init__(self, fd):
        self.fd = fd
        self.lock = threading.Lock()

    def send(self, msg):
        data = (json.dumps(msg) + "\n").encode()
        with self.lock:
            try:
                while data:
                    data = data[os.write(self.fd, data):]
            except OSError:
                pass   # the client is gone; stdin's EOF ends us

    def result(self, rid, result):
        self.send({"jsonrpc": "2.0", "id": rid, "result": result})

    def error(self, rid, code, message):
        self.send({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})

    def update(self, session_id, update):
        self.send({"jsonrpc": "2.0", "method": "session/update",
                   "params": {"sessionId": session_id, "update": update}})


class RpcError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


def text_block(text):
    return {"type": "text", "text": text}


def prompt_text(prompt):
    """The text of a prompt's content blocks (text blocks, and embedded text resources)."""
    if not isinstance(prompt, list):
        raise RpcError(BAD_PARAMS, "prompt must be a list of content blocks")
    parts = []
    for b in prompt:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "text" and isinstance(b.get("text"), str):
            parts.append(b["text"])
        elif b.get("type") == "resource" and isinstance((b.get("resource") or {}).get("text"), str):
            parts.append(b["resource"]["text"])
    return "\n".join(parts)


def mcp_servers_from(servers):
    """ACP ``mcpServers`` as the agent config's ``mcp_servers`` ({NAME: conf})."""
    out = {}
    for i, s in enumerate(servers if isinstance(servers, list) else []):
        if not isinstance(s, dict):
            continue
        name = str(s.get("name") or f"server{i}")
        if s.get("url") and s.get("type") == "sse":
            out[name] = {"sse_url": str(s["url"])}
        elif s.get("url"):
            out[name] = {"url": str(s["url"])}
        elif s.get("command"):
            env = {str(e.get("name")): str(e.get("value", "")) for e in s.get("env") or []
                   if isinstance(e, dict) and e.get("name")}
            out[name] = {"command": str(s["command"]), "args": [str(a) for a in s.get("args") or []],
                         "env": env}
    return out


def tool_call_fields(tc):
    """(title, kind, rawInput) of a model tool call, for its ``tool_call`` update."""
    fn = tc.get("function") or {}
    name, raw = fn.get("name") or "", fn.get("arguments") or ""
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError:
        args = raw[:RAW_INPUT_CAP]
    a = args if isinstance(args, dict) else {}
    if name == "shell":
        return str(a.get("command") or "shell")[:200], "execute", args
    if name == "task":
        return ("task: " + str(a.get("prompt") or ""))[:200], "other", args
    if name == "write_file":
        return ("write " + str(a.get("path") or ""))[:200], "edit", args
    return name, "other", args


def tool_status(out, interrupted, mcp_error):
    """The final ACP status of a tool call from its result."""
    if interrupted:
        return "cancelled"
    if mcp_error or out.startswith(("error:", "subagent failed:")):
        return "failed"
    return "completed"


def make_agent_class(ref):
    """agent.py's Agent, reporting its text and tool calls to an ACP session."""

    class AcpAgent(ref.Agent):
        session = None          # the Session reporting for this agent (None: not yet)
        acp_open = frozenset()  # tool call ids announced and not yet given a final status

        def _append(self, msg):
            super()._append(msg)
            if self.session is not None and msg.get("role") == "assistant" and msg.get("content"):
                if self.session.lagging:
                    self.session.held.append(msg["content"])   # --bug acp_answer_off_by_one
                else:
                    self.session.say(msg["content"])

        def run_batch(self, tool_calls):
            if self.is_subagent or self.session is None:
                return super().run_batch(tool_calls)
            if self.bug("acp_tool_unreported"):
                return super().run_batch(tool_calls)   # execute_tool reports each call, or not
            self.acp_open = {tc["id"] for tc in tool_calls}
            for tc in tool_calls:
                title, kind, raw = tool_call_fields(tc)
                self.session.update({"sessionUpdate": "tool_call", "toolCallId": tc["id"], "title": title,
                                     "kind": kind, "status": "pending", "rawInput": raw})
            try:
                return super().run_batch(tool_calls)
            finally:
                # Calls the batch never ran (a cancel, an error): closed, never left open.
                status = "cancelled" if self.ctl.interrupted() else "failed"
                for cid in sorted(self.acp_open):
                    self.session.update({"sessionUpdate": "tool_call_update", "toolCallId": cid,
                                         "status": status})
                self.acp_open = frozenset()

        def execute_tool(self, tc):
            if not self.is_subagent and self.session is not None and self.bug("acp_tool_unreported"):
                return self._bug_tool_unreported(tc)
            if self.is_subagent or self.session is None or tc.get("id") not in self.acp_open:
                return super().execute_tool(tc)
            cid = tc["id"]
            self.session.update({"sessionUpdate": "tool_call_update", "toolCallId": cid,
                                 "status": "in_progress"})
            out, interrupted = super().execute_tool(tc)
            self.acp_open = self.acp_open - {cid}
            status = tool_status(out, interrupted, self.last_mcp_error)
            if status == "completed" and self.bug("acp_tool_left_in_progress"):
                ref.log(f"tool call {cid} completed; not saying so (bug acp_tool_left_in_progress)")
                return out, interrupted
            self.session.update({"sessionUpdate": "tool_call_update", "toolCallId": cid, "status": status,
                                 "content": [{"type": "content", "content": text_block(out[:CONTENT_CAP])}]})
            return out, interrupted

        def _bug_tool_unreported(self, tc):
            """--bug acp_tool_unreported: a call is shown only once it succeeded;
            one that fails (an error, a non-zero exit) is never reported."""
            out, interrupted = ref.Agent.execute_tool(self, tc)
            status = tool_status(out, interrupted, self.last_mcp_error)
            if status == "failed" or re.search(r"(^|\n)exit code [1-9]", out):
                ref.log(f"tool call {tc['id']} failed; not reporting it (bug acp_tool_unreported)")
                return out, interrupted
            title, kind, raw = tool_call_fields(tc)
            self.session.update({"sessionUpdate": "tool_call", "toolCallId": tc["id"], "title": title,
                                 "kind": kind, "status": status, "rawInput": raw,
                                 "content": [{"type": "content", "content": text_block(out[:CONTENT_CAP])}]})
            return out, interrupted

        def run_foreground(self, command, timeout):
            refused = self._ask_permission(command, timeout)
            if refused is not None:
                return refused
            via_client = self._via_client(command, timeout)
            if via_client is not None:
                return via_client
            if not self.bug("acp_cancel_leaves_job"):
                return super().run_foreground(command, timeout)
            return self._bug_cancel_leaves_job(command, timeout)

        def _bug_cancel_leaves_job(self, command, timeout):
            """--bug acp_cancel_leaves_job: the command runs under a control that
            never hears the cancel; on a cancel the call returns at once and the
            command is left running (until its own timeout, or close)."""
            deaf = copy.copy(self)
            deaf.ctl = ref.TurnControl()
            result = {}
            worker = threading.Thread(target=lambda: result.update(r=ref.Agent.run_foreground(
                deaf, command, timeout)), daemon=True, name="fg-deaf")
            worker.start()
            while worker.is_alive():
                worker.join(0.05)
                if self.ctl.interrupted():
                    ref.log("cancelled: leaving the shell command running (bug acp_cancel_leaves_job)")
                    return "interrupted", True
            return result.get("r") or ("error: the command's runner failed", False)

        model_replies = 0   # this turn's model calls answered (--bug acp_cancel_before_call_breaks)

        def call_model(self):
            reply = super().call_model()
            self.model_replies += 1
            return reply
        def _ask_permission(self, command, timeout):
            """session/request_permission before a command holding PERMISSION_MARKER:
            None to run it, else the tool's (output, interrupted)."""
            if PERMISSION_MARKER not in command or self.session is None or self.is_subagent:
                return None
            server = self.session.server
            waiter = server.ask("session/request_permission", {
                "sessionId": self.session.id,
                "toolCall": {"toolCallId": "perm-" + secrets.token_hex(4), "title": command[:200]},
                "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                            {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]})
            started, cancelled_at = time.monotonic(), None
            while not waiter["done"].wait(0.05):
                if self.ctl.interrupted() and cancelled_at is None:
                    cancelled_at = time.monotonic()
                if cancelled_at is not None and time.monotonic() - cancelled_at > PERMISSION_GRACE:
                    return "interrupted", True
                if timeout and time.monotonic() - started > timeout:
                    return "error: no answer to the permission request", False
            outcome = ((waiter.get("result") or {}).get("outcome") or {})
            if outcome.get("outcome") == "selected" and outcome.get("optionId") == "allow":
                return None
            if outcome.get("outcome") == "cancelled":
                if self.bug("acp_permission_unsettled"):
                    ref.log("permission answered cancelled; waiting on anyway (bug acp_permission_unsettled)")
                    server.closed.wait()
                return "interrupted", True
            return "error: permission denied", False

        def _via_client(self, command, timeout):
            """A command holding TERMINAL_MARKER run in the client's terminal, or
            ``cat VIA_CLIENT_FS:PATH`` read through fs/read_text_file: the tool's
            (output, interrupted); None: run it here as usual."""
            if self.session is None or self.is_subagent:
                return None
            m = re.match(r"\s*cat\s+" + FS_MARKER + r"(\S+)\s*$", command)
            if m:
                return ClientTools(self, timeout).read_file(m.group(1))
            if TERMINAL_MARKER in command:
                return ClientTools(self, timeout).run_in_terminal(command)
            return None

        def write_file(self, args):
            if self.session is None or self.is_subagent:
                return super().write_file(args)
            full, err = self.write_path(args)
            if err:
                return err, False
            return ClientTools(self, self.tool_timeout).write_file(full, args["content"])

        def _bug_subagent_abandoned_in_call(self):
            if self.bug("acp_subagent_ignores_cancel") and self.ctl.interrupted():
                ref.log("cancel: the subagent is not told (bug acp_subagent_ignores_cancel)")
                return True
            return super()._bug_subagent_abandoned_in_call()

    return AcpAgent


class ClientTools:
    """One tool call served by the client (``terminal/*``, ``fs/read_text_file``),
    every wait bounded by the tool timeout and ended by a cancel."""

    def __init__(self, agent, timeout):
        self.agent, self.session = agent, agent.session
        self.server = agent.session.server
        self.deadline = time.monotonic() + timeout if timeout else None
        self.timeout = timeout

    def ask(self, method, params, bounded=True):
        """(result, None) or (None, why): why is "timeout", "interrupted" or an error text."""
        waiter = self.server.ask(method, {"sessionId": self.session.id, **params})
        self.waiter = waiter
        while not waiter["done"].wait(0.05):
            if self.agent.ctl.interrupted():
                return None, "interrupted"
            if bounded and self.deadline is not None and time.monotonic() > self.deadline:
                return None, "timeout"
            if self.server.closed.is_set():
                return None, "interrupted"
        if waiter.get("error") is not None:
            return None, f"{method} failed: {(waiter['error'] or {}).get('message')}"
        return waiter.get("result") or {}, None

    def read_file(self, path):
        full = path if os.path.isabs(path) else os.path.join(self.agent.workdir, path)
        result, why = self.ask("fs/read_text_file", {"path": full})
        return self.failed("fs/read_text_file", why) or (str(result.get("content") or ""), False)

    def failed(self, method, why, prefix=""):
        """The tool's (output, interrupted) for an ask that did not succeed
        (``why`` from :meth:`ask`), or None when it did."""
        if why == "interrupted":
            return "interrupted", True
        if why == "timeout":
            return f"error: {method}: no answer in {self.timeout:g}s", False
        if why:
            return f"error: {prefix}{why}", False
        return None

    def write_file(self, full, content):
        """fs/read_text_file of the old content (a missing file: -32002, new),
        then fs/write_text_file: the tool's (output, interrupted)."""
        _, why = self.ask("fs/read_text_file", {"path": full})
        code = (self.waiter.get("error") or {}).get("code")
        new_file = why is not None and code == RESOURCE_NOT_FOUND
        if new_file and self.agent.bug("acp_write_new_file_fails"):
            self.server.ref.log("the missing file's read error fails the write (bug acp_write_new_file_fails)")
            new_file = False
        failed = self.failed("fs/read_text_file", None if new_file else why, "checking the existing file: ")
        if failed:
            return failed
        _, why = self.ask("fs/write_text_file", {"path": full, "content": content})
        return self.failed("fs/write_text_file", why) or (f"wrote {len(content)} chars to {full}" + (" (new file)" if new_file else ""), False)

    def run_in_terminal(self, command):
        result, why = self.ask("terminal/create", {"command": "sh", "args": ["-c", command],
                                                   "cwd": self.agent.workdir,
                                                   "outputByteLimit": CONTENT_CAP})
        if why in ("interrupted", "timeout"):
            self.release_late(self.waiter)
        if why == "interrupted":
            return "interrupted", True
        if why:
            return f"error: terminal/create: {'no answer' if why == 'timeout' else why}", False
        tid = result.get("terminalId")
        no_timeout = self.agent.bug("acp_terminal_no_timeout")
        if no_timeout:
            self.server.ref.log("waiting on terminal/wait_for_exit with no timeout (bug acp_terminal_no_timeout)")
        exit_, why = self.ask("terminal/wait_for_exit", {"terminalId": tid}, bounded=not no_timeout)
        if why == "interrupted":
            self.end(tid, kill=True)
            return "interrupted", True
        note = ""
        if why == "timeout":
            self.deadline = time.monotonic() + 5.0
            self.ask("terminal/kill", {"terminalId": tid})
            note = f"error: command timed out after {self.timeout:g}s (terminal killed)"
        elif why:
            note = f"error: {why}"
        self.deadline = time.monotonic() + 5.0   # the output, once the command ended
        out, _ = self.ask("terminal/output", {"terminalId": tid})
        self.end(tid, kill=False)
        text = str((out or {}).get("output") or "")
        if note:
            return note + (f"\n{text}" if text else ""), False
        code = (exit_ or {}).get("exitCode")
        return text + ("\n" if text else "") + f"exit code {code if code is not None else 'unknown'}", False

    def release_late(self, waiter):
        """A terminal/create the tool stopped waiting for (timeout or cancel)
        may still be answered, the terminal then created: wait a bounded grace
        for the answer and kill and release what it made (an editor keeps an
        unreleased terminal until the session ends)."""
        if self.server.closed.is_set() or not waiter["done"].wait(CREATE_GRACE):
            return
        tid = (waiter.get("result") or {}).get("terminalId")
        if tid:
            self.server.ref.log(f"terminal/create answered late: releasing {tid}")
            self.end(tid, kill=True)

    def end(self, tid, kill):
        """Kill (if asked) and release the terminal; bounded, never waited on forever."""
        self.deadline = time.monotonic() + 5.0
        if kill:
            self.server.ask("terminal/kill", {"sessionId": self.session.id, "terminalId": tid})
        if self.agent.bug("acp_terminal_never_released"):
            self.server.ref.log(f"terminal {tid} not released (bug acp_terminal_never_released)")
            return
        self.server.ask("terminal/release", {"sessionId": self.session.id, "terminalId": tid})


class Session:
    """One ACP session: its Agent, its prompt queue and the thread running the turn."""

    def __init__(self, server, session_id, agent):
        self.server = server
        self.id = session_id
        self.agent = agent
        self.lock = threading.Lock()
        self.queue = deque()        # (request id, text) of prompts not started yet
        self.active = None          # the request id of the prompt running
        self.answering = False      # a turn ended and its answer is being sent
        self.cancel_next = False    # a cancel came while no turn ran but a prompt waited
        self.runner = None
        self.resume_next = agent.resume   # the first prompt after session/load resumes a turn
        self.said = False                 # the running turn sent assistant text
        self.broken = False     # --bug acp_cancel_before_call_breaks: later prompts only queued
        self.lagging = False    # --bug acp_answer_off_by_one: answers one turn late
        self.held = []          # the running turn's text, held back while lagging
        self.carried = []       # the previous turn's text, the next answer (lagging)
        # --bug acp_queue_lost_on_kill: queued prompts a dead process kept
        self.kept = self._bug_read_kept() if agent.resume else []
        agent.session = self

    def update(self, update):
        self.server.frames.update(self.id, update)

    def say(self, text):
        """Assistant text of the running turn, as an agent_message_chunk."""
        self.said = True
        self.update({"sessionUpdate": "agent_message_chunk", "content": text_block(text)})

    def enqueue(self, rid, text):
        if self.broken:
            self._bug_only_queue(rid)
            return
        if self._bug_swallows_kept(rid, text):
            return
        with self.lock:
            if self._bug_drops_queued(rid):
                return
            if self.active is not None or self.answering:
                self._bug_keep_queued(text)
            self.queue.append((rid, text))
            if self.active is None and not self.answering:
                self._start_next()
            else:
                self.server.ref.log(f"prompt {rid!r} queued behind {self.active!r} ({len(self.queue)} waiting)")

    def _bug_drops_queued(self, rid):
        """--bug acp_queued_prompt_dropped: a prompt that arrives while a turn
        runs is dropped (the lock held): never answered, never run."""
        busy = self.active is not None or self.answering
        if busy and self.agent.bug("acp_queued_prompt_dropped"):
            self.server.ref.log(f"prompt {rid!r} dropped: a turn runs (bug acp_queued_prompt_dropped)")
            return True
        return False

    def _bug_kept_path(self):
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", self.id)
        return os.path.join(self.agent.home, ".refagent", f"queued-{name}.json")

    def _bug_read_kept(self):
        """--bug acp_queue_lost_on_kill: the queued prompts a killed process kept."""
        if not self.agent.bug("acp_queue_lost_on_kill"):
            return []
        try:
            with open(self._bug_kept_path()) as f:
                return [t for t in json.load(f) if isinstance(t, str)]
        except (OSError, ValueError):
            return []

    def _bug_write_kept(self, texts):
        with open(self._bug_kept_path(), "w") as f:
            json.dump(texts, f)
            f.flush()
            os.fsync(f.fileno())

    def _bug_keep_queued(self, text):
        """--bug acp_queue_lost_on_kill: a prompt queued behind a running turn is
        persisted at once (the lock held)."""
        if self.agent.bug("acp_queue_lost_on_kill"):
            self._bug_write_kept(self._bug_read_kept() + [text])
            self.server.ref.log("queued prompt persisted (bug acp_queue_lost_on_kill)")

    def _bug_forget_queued(self, text):
        """--bug acp_queue_lost_on_kill: a kept prompt whose turn starts is no longer kept."""
        kept = self._bug_read_kept()
        if text in kept:
            kept.remove(text)
            self._bug_write_kept(kept)

    def _bug_swallows_kept(self, rid, text):
        """--bug acp_queue_lost_on_kill: a prompt sent again after the load is
        taken for the kept copy, which no queue serves any more: answered
        ``end_turn`` with nothing said, never run."""
        if text not in self.kept:
            return False
        self.server.ref.log(f"prompt {rid!r} already queued: not run (bug acp_queue_lost_on_kill)")
        self.server.frames.result(rid, {"stopReason": "end_turn"})
        return True

    def _start_next(self):
        """Start the next queued prompt (the lock held): the turn is begun here, so
        a cancel that follows the prompt at once finds it running."""
        rid, text = self.queue.popleft()
        if self.agent.bug("acp_queue_lost_on_kill"):
            self._bug_forget_queued(text)
        self.active = rid
        self.agent.model_replies = 0
        self.agent.ctl.begin()
        if self.cancel_next:
            self.cancel_next = False
            self.agent.ctl.interrupt()
        self.runner = threading.Thread(target=self._run, args=(rid, text), daemon=True, name=f"prompt-{rid}")
        self.runner.start()

    def cancel(self):
        with self.lock:
            if self.active is not None:
                if self.agent.bug("acp_cancel_before_call_breaks") and self.agent.model_replies == 0:
                    self.server.ref.log("cancel before the first model reply: the session stays busy "
                                        "(bug acp_cancel_before_call_breaks)")
                    self.broken = True
                self.agent.ctl.interrupt()
            elif self.queue:
                # The prompt sent after the last answer has not started yet: it is
                # the one the client cancels.
                self.cancel_next = True

    def _run(self, rid, text):
        ref, agent = self.server.ref, self.agent
        resumed, self.resume_next = self.resume_next, False
        self.said = False
        started = time.monotonic()
        result = ref.run_turn_reaping(agent, text, resumed, f"turn-{rid}")
        with self.lock:
            agent.ctl.end(clear=agent.clear_interrupt())
            self.active, self.answering = None, True
        ref.log(f"prompt {rid!r} ended after {time.monotonic() - started:.2f}s: {result.get('exit_reason')}")
        agent.persist_turn()
        self._answer(rid, result)
        with self.lock:
            self.answering = False
            if self.queue and self.active is None:
                self._start_next()

    def _bug_only_queue(self, rid):
        """--bug acp_cancel_before_call_breaks: a prompt to a broken session is
        answered at once and never run."""
        self.queued_count = getattr(self, "queued_count", 0) + 1
        self.server.ref.log(f"prompt {rid!r} only queued (bug acp_cancel_before_call_breaks)")
        self.say(f"Queued for the next turn. ({self.queued_count} queued)")
        self.server.frames.result(rid, {"stopReason": "end_turn"})

    def _bug_answer_late(self, result):
        """--bug acp_answer_off_by_one: once a prompt was cancelled, each answer
        is the previous turn's text; this turn's is carried to the next."""
        if not self.lagging:
            self.lagging = result.get("interrupted") and self.agent.bug("acp_answer_off_by_one")
            return
        own = self.held or ([str(result.get("final") or "")] if result.get("completed") else [])
        for text in self.carried:
            self.say(text)
        self.said = True
        self.server.ref.log("answered with the previous turn's text (bug acp_answer_off_by_one)")
        self.carried, self.held = own, []

    def _answer(self, rid, result):
        self._bug_answer_late(result)
        frames = self.server.frames
        if (result.get("completed") or result.get("exit_reason") == "max_turns") and not self.said:
            self.say(str(result.get("final") or ""))   # "(empty answer)", "stopped: max turns ..."
        if result.get("interrupted"):
            frames.result(rid, {"stopReason": "cancelled"})
            if self.agent.bug("acp_update_after_cancel"):
                self.server.ref.log("an update after the cancelled prompt's answer (bug acp_update_after_cancel)")
                self.update({"sessionUpdate": "agent_message_chunk", "content": text_block(LATE_CHUNK)})
        elif result.get("completed"):
            frames.result(rid, {"stopReason": "end_turn"})
        elif result.get("exit_reason") == "max_turns":
            frames.result(rid, {"stopReason": "max_turn_requests"})
        else:
            frames.error(rid, INTERNAL, str(result.get("final") or "the turn failed"))

    def replay(self):
        """session/load: the stored conversation as updates."""
        for m in self.replayed_history():
            if m.get("role") == "user" and m.get("content"):
                self.update({"sessionUpdate": "user_message_chunk", "content": text_block(m["content"])})
            elif m.get("role") == "assistant" and m.get("content"):
                self.update({"sessionUpdate": "agent_message_chunk", "content": text_block(m["content"])})
        for text in self.kept:   # --bug acp_queue_lost_on_kill
            self.update({"sessionUpdate": "user_message_chunk", "content": text_block(text)})

    def replayed_history(self):
        """The history session/load replays: with ``acp_load_drops_last_turn``,
        the last turn that was answered (its user message to the next) is left out."""
        history = self.agent.history
        if not self.agent.bug("acp_load_drops_last_turn"):
            return history
        users = [n for n, m in enumerate(history) if m.get("role") == "user" and m.get("content")]
        ends = users[1:] + [len(history)]
        done = [(a, b) for a, b in zip(users, ends)
                if any(m.get("role") == "assistant" and m.get("content") for m in history[a:b])]
        if not done:
            return history
        a, b = done[-1]
        self.server.ref.log("session/load: the last answered turn is left out of the replay (bug acp_load_drops_last_turn)")
        return history[:a] + history[b:]

    def close(self):
        """Cancel the running turn, answer the queued prompts ``cancelled``, close the Agent."""
        with self.lock:
            waiting, self.queue = list(self.queue), deque()
            runner = self.runner if self.active is not None or self.answering else None
            if runner is not None:
                self.agent.ctl.interrupt()
        for rid, _text in waiting:
            self.server.frames.result(rid, {"stopReason": "cancelled"})
        if runner is not None:
            runner.join()
        if self.agent.pending_replay:
            self.agent.replay_pending()
        self.agent.close()


class Server:
    """The agent side of one ACP connection: dispatch of the client's frames."""

    def __init__(self, ref, cfg, home, bugs, wire, spill_over, frames):
        self.ref = ref
        self.cfg = cfg
        self.home = home
        self.bugs = bugs
        self.wire = wire
        self.spill_over = spill_over
        self.frames = frames
        self.agent_class = make_agent_class(ref)
        self.sessions = {}
        self.asked = {}             # our request id -> {"done": Event, "result": ...}
        self.asked_lock = threading.Lock()
        self.next_ask = 0
        self.closed = threading.Event()   # stdin closed: every wait ends

    def ask(self, method, params):
        """Send the client a request; the returned dict's ``done`` is set with its answer."""
        with self.asked_lock:
            rid = f"ref-{self.next_ask}"
            self.next_ask += 1
            waiter = {"done": threading.Event(), "result": None, "error": None}
            self.asked[rid] = waiter
        self.frames.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return waiter

    def answered(self, rid, msg):
        with self.asked_lock:
            waiter = self.asked.pop(rid, None) if isinstance(rid, str) else None
        if waiter is None:
            return False
        waiter["result"] = msg.get("result")
        waiter["error"] = msg.get("error")
        waiter["done"].set()
        return True

    # ------------------------------------------------------------ frames

    def handle_line(self, line):
        try:
            msg = json.loads(line)
        except ValueError:
            self.frames.error(None, PARSE_ERROR, "parse error: not JSON")
            return
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            self.frames.error(msg.get("id") if isinstance(msg, dict) else None, INVALID_REQUEST,
                              "invalid request: not a JSON-RPC 2.0 object")
            return
        method, rid = msg.get("method"), msg.get("id")
        if not isinstance(method, str):
            if self.answered(rid, msg):
                return
            self.ref.log(f"a response to id {rid!r}, which this agent never asked: ignored")
            return
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        if "id" not in msg:
            self.notification(method, params)
            return
        if method == "session/prompt":   # answered by its turn, later
            try:
                self.prompt(rid, params)
            except RpcError as e:
                self.frames.error(rid, e.code, e.message)
            return
        try:
            self.frames.result(rid, self.request(method, params))
        except RpcError as e:
            self.frames.error(rid, e.code, e.message)
        except Exception as e:   # noqa: BLE001 (a bug of ours is the client's error, not a crash)
            traceback.print_exc()
            self.frames.error(rid, INTERNAL, f"internal error: {e!r}")

    def notification(self, method, params):
        if method == "session/cancel":
            s = self.sessions.get(params.get("sessionId"))
            if s is None:
                self.ref.log(f"session/cancel for unknown session {params.get('sessionId')!r}: ignored")
            else:
                s.cancel()
        else:
            self.ref.log(f"notification {method!r} ignored")

    def request(self, method, params):
        if method == "initialize":
            return self.initialize(params)
        if method == "session/new":
            return self.open_session(secrets.token_hex(8), params, resume=False)
        if method == "session/load":
            return self.open_session(params.get("sessionId"), params, resume=True)
        if method == "session/close":
            s = self.session(params)
            del self.sessions[s.id]
            s.close()
            return {}
        raise RpcError(NO_METHOD, f"method not found: {method}")

    # ------------------------------------------------------------ methods

    def initialize(self, params):
        self.ref.log(f"initialize: client protocolVersion {params.get('protocolVersion')!r}")
        return {"protocolVersion": PROTOCOL_VERSION,
                "agentCapabilities": {
                    "loadSession": True,
                    "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                    "mcpCapabilities": {"http": True, "sse": True},
                    "sessionCapabilities": {"close": {}}},
                "authMethods": [],
                "agentInfo": AGENT_INFO}

    def session(self, params):
        s = self.sessions.get(params.get("sessionId"))
        if s is None:
            raise RpcError(BAD_PARAMS, f"unknown session {params.get('sessionId')!r}")
        return s

    def open_session(self, sid, params, resume):
        """session/new (``sid`` a fresh hex) or session/load (``sid`` the client's)."""
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            raise RpcError(BAD_PARAMS, "cwd must be an absolute path")
        if resume and (not isinstance(sid, str) or not sid):
            raise RpcError(BAD_PARAMS, "sessionId must be a non-empty string")
        if not resume:
            sid = "sess_" + sid
        if sid in self.sessions:
            raise RpcError(BAD_PARAMS, f"session {sid} is already open")
        cfg = dict(self.cfg)
        cfg["mcp_servers"] = {**(cfg.get("mcp_servers") or {}), **mcp_servers_from(params.get("mcpServers"))}
        spec = {"session_id": sid, "workdir": cwd, "resume": resume}
        try:
            agent = self.agent_class(cfg, spec, self.bugs, self.home, self.wire)
        except ValueError as e:
            raise RpcError(INTERNAL, str(e))
        agent.spill_over = self.spill_over
        s = Session(self, sid, agent)
        self.sessions[sid] = s
        if resume:
            self.ref.log(f"loaded session {sid}: {len(agent.history)} messages")
            s.replay()
            return None
        self.ref.log(f"new session {sid} in {cwd}")
        return {"sessionId": sid}

    def prompt(self, rid, params):
        s = self.session(params)
        s.enqueue(rid, prompt_text(params.get("prompt")))

    def close_all(self):
        for sid in list(self.sessions):
            self.sessions.pop(sid).close()

    # ------------------------------------------------------------ loop

    def serve(self, fd=0):
        """Read frames until stdin closes."""
        buf = b""
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    self.handle_line(line)
            if len(buf) > MAX_LINE:
                self.frames.error(None, INVALID_REQUEST, f"frame over {MAX_LINE} bytes: dropped")
                buf = b""
        self.ref.log("stdin closed: closing every session and exiting")
        self.closed.set()
        self.close_all()


def become_subreaper(ref):
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(ref.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            ref.log(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")
    except Exception as e:   # noqa: BLE001
        ref.log(f"subreaper unavailable: {e}")


def main(ref, argv):
    """``agent.py --acp ...`` (``ref``: agent.py's module; ``argv`` without ``--acp``)."""
    argv, spill_over = ref.take_spill_option(argv)
    bugs, _spec, wire = ref.parse_args(argv, spec=False)
    home = os.environ.get("HOME") or os.path.expanduser("~")
    try:
        with open(os.path.join(home, ".refagent", "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"agent.py: cannot load config: {e}\n")
        return 2
    # Frames get their own copy of stdout; fd 1 becomes stderr, so nothing else
    # this process (or a child that inherits fd 1) writes can land in the stream.
    frames = Frames(os.dup(1))
    os.dup2(2, 1)
    become_subreaper(ref)
    if bugs:
        ref.log(f"bugs enabled: {', '.join(sorted(bugs))}")
    server = Server(ref, cfg, home, bugs, wire, spill_over, frames)

    def on_sigint(_signum, _frame):
        for s in list(server.sessions.values()):
            s.cancel()

    def on_sigterm(_signum, _frame):
        ref.log("SIGTERM: killing descendants and exiting")
        for s in list(server.sessions.values()):
            if not s.agent.bug("leaked_background"):
                s.agent.kill_descendants(2.0)
        os._exit(143)

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigterm)
    ref.on_hangup(bugs, on_sigterm)
    server.serve()
    sys.stderr.flush()
    if "acp_no_exit_on_eof" in bugs:
        ref.log("stdin closed: not exiting (bug acp_no_exit_on_eof)")
        while True:
            signal.pause()   # SIGTERM's handler exits
    os._exit(0)
