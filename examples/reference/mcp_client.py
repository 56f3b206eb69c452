"""The reference agent's MCP client (Python 3.11, stdlib only).

Owns the agent's side of the Model Context Protocol (spec 2025-06-18): one
``McpServer`` per server configured in ``$HOME/.refagent/config.json``
(``"mcp_servers": {NAME: {"command": ..., "args": [...]} | {"url": ...}}``),
over either transport:

  * stdio: the server is spawned (``command args``, its own session, stdin and
    stdout pipes, stderr logged), newline-delimited JSON-RPC both ways;
  * streamable HTTP: every message is a ``POST`` to the endpoint with
    ``Accept: application/json, text/event-stream``; the reply is one JSON
    message or an SSE stream of them; the ``Mcp-Session-Id`` of the
    ``initialize`` reply goes on every later request; ``DELETE`` ends it.

Lifecycle: ``initialize`` -> ``notifications/initialized`` -> ``tools/list``,
bounded by the boot timeout (a hang at boot leaves the server unavailable, its
process shut down, and the agent starts without its tools). Each tool is
offered to the model as ``mcp_<server>_<tool>``.

Transports: stdio (``command``/``args``), Streamable HTTP (``url``) and the
legacy HTTP+SSE transport (``sse_url``: a GET stream whose ``endpoint`` event
names where to POST; answers come back on the stream).

A ``tools/call`` is bounded by the call timeout (progress notifications never
extend it); on timeout or interrupt the client sends ``notifications/cancelled``
with the request id and a reason. A server that dies, resets the connection or
sends a frame that is not JSON-RPC fails the call with an error result; the
next call reconnects once (respawn / new session) or reports the tool
unavailable. After ``notifications/tools/list_changed`` the tools are listed
again once the current call returns, so the next model call offers the new
schemas. Results are capped before they reach the model. Shutdown follows
the spec: stdio closes stdin, waits, SIGTERM, waits, SIGKILL; HTTP sends DELETE.

Bug switches (``bugs``): ``mcp_no_timeout`` (a call waits forever unless
interrupted), ``mcp_no_cancel`` (no ``notifications/cancelled``),
``mcp_timeout_no_cancel`` (a call whose timeout fires is forgotten without
``notifications/cancelled``, the connection kept open; an interrupt still cancels),
``mcp_leak_server`` (close leaves stdio servers running), ``mcp_boot_drop``,
``mcp_retry_unauthorized``, ``mcp_stale_schema``, ``mcp_no_reconnect`` (a server
whose connection was lost is dropped with its tools for good, silently),
``mcp_sse_no_deadline`` (over the legacy HTTP+SSE transport, start-up waits for
the endpoint event and the answers to ``initialize`` and ``tools/list`` without
the boot deadline). ``mcp_drop_error_result``
lives in the agent (it drops the result from the history).
"""

import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.parse

PROTOCOL_VERSION = "2025-06-18"
CLIENT_INFO = {"name": "chaosrun-refagent", "version": "1.0"}
MAX_FRAME = 64_000_000        # bytes of one message kept; a longer one is dropped
RESULT_CAP = 50_000           # chars of a tool result given to the model
STDERR_LINE_CAP = 500
SHUTDOWN_WAIT = 2.0           # s after closing stdin, then after SIGTERM
POLL = 0.05


class McpError(Exception):
    """A call that produced no result. ``broken``: the connection is unusable."""

    def __init__(self, msg, broken=False, timeout=False, unsent=False):
        super().__init__(msg)
        self.msg = msg
        self.broken = broken
        self.timeout = timeout
        # The request never reached the server (HTTP 404 on an expired
        # session; a write to a stdio server that is gone).
        self.unsent = unsent


def tool_name(server, tool):
    """The model-facing name of `tool` of `server` (OpenAI's name alphabet, 64 chars)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"mcp_{server}_{tool}")[:64]


def result_text(result, cap=RESULT_CAP):
    """(text, is_error) of a tools/call result, text capped at `cap` chars."""
    if not isinstance(result, dict):
        return f"error: MCP result is not an object: {json.dumps(result)[:200]}", True
    parts = []
    for c in result.get("content") or []:
        if not isinstance(c, dict):
            continue
        if c.get("type") == "text" and isinstance(c.get("text"), str):
            parts.append(c["text"])
        elif c.get("type") == "resource" and isinstance((c.get("resource") or {}).get("text"), str):
            parts.append(c["resource"]["text"])
        else:
            parts.append(f"[{c.get('type')} content]")
    text = "\n".join(parts)
    if not text and result.get("structuredContent") is not None:
        text = json.dumps(result["structuredContent"])
    if len(text) > cap:
        text = text[:cap] + f"\n[output truncated: {len(text)} chars total]"
    return text if text else "(no output)", result.get("isError") is True


class Pending:
    """One request waiting for its response."""

    def __init__(self):
        self.event = threading.Event()
        self.response = None
        self.error = None

    def resolve(self, response=None, error=None):
        if not self.event.is_set():
            self.response, self.error = response, error
            self.event.set()


class Connection:
    """What both transports share: request ids, pending requests, dispatch."""

    def __init__(self, name, log):
        self.name = name
        self.log = log
        self.lock = threading.Lock()
        self.next_id = 1
        self.pending = {}
        self.dead = None          # why the connection is unusable, once it is
        self.notes = {}           # notification method -> count (logged sparsely)
        self.list_changed = False # the server announced notifications/tools/list_changed

    def new_id(self):
        with self.lock:
            i = self.next_id
            self.next_id += 1
            return i

    def fail_all(self, msg, broken):
        with self.lock:
            if broken and self.dead is None:
                self.dead = msg
            pend = list(self.pending.values())
        for p in pend:
            p.resolve(error=McpError(msg, broken))

    def dispatch(self, msg):
        """Route one parsed message from the server."""
        if isinstance(msg, list):          # a JSON-RPC batch
            for m in msg[:1000]:
                self.dispatch(m)
            return
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            self.malformed(json.dumps(msg)[:120])
            return
        if "method" in msg:
            if "id" in msg:
                self.answer_server_request(msg)
            else:
                m = str(msg.get("method"))
                with self.lock:
                    n = self.notes[m] = self.notes.get(m, 0) + 1
                    if m == "notifications/tools/list_changed":
                        self.list_changed = True
                if n & (n - 1) == 0:      # 1, 2, 4, 8, ...: progress and storms stay quiet
                    self.log(f"mcp {self.name}: notification {m} (#{n}) ignored")
            return
        with self.lock:
            p = self.pending.get(msg.get("id"))
        if p is None:
            self.log(f"mcp {self.name}: response for unknown id {str(msg.get('id'))[:40]} ignored")
            return
        if "result" in msg or isinstance(msg.get("error"), dict):
            p.resolve(response=msg)
        else:
            p.resolve(error=McpError("malformed MCP response: neither result nor error"))

    def malformed(self, what):
        """A frame that is not JSON-RPC: every in-flight request fails with it."""
        self.log(f"mcp {self.name}: malformed frame {what!r}")
        self.fail_all(f"malformed frame from MCP server {self.name}: {what[:80]!r}", broken=False)

    def parse_frame(self, raw):
        try:
            msg = json.loads(raw)
        except ValueError:
            self.malformed(raw[:120].decode("utf-8", "replace") if isinstance(raw, bytes) else raw[:120])
            return
        self.dispatch(msg)

    def answer_server_request(self, msg):
        if msg.get("method") == "ping":
            reply = {"jsonrpc": "2.0", "id": msg["id"], "result": {}}
        else:
            reply = {"jsonrpc": "2.0", "id": msg["id"],
                     "error": {"code": -32601, "message": "method not found"}}
        try:
            self.notify_raw(reply)
        except McpError as e:
            self.log(f"mcp {self.name}: could not answer {msg.get('method')}: {e.msg}")

    def register(self, rid):
        p = Pending()
        with self.lock:
            if self.dead:
                raise McpError(self.dead, broken=True)
            self.pending[rid] = p
        return p

    def unregister(self, rid):
        with self.lock:
            self.pending.pop(rid, None)


class StdioConnection(Connection):
    """A spawned server, newline-delimited JSON-RPC on its stdin/stdout."""

    def __init__(self, name, command, args, env, cwd, log):
        super().__init__(name, log)
        self.write_lock = threading.Lock()
        self.proc = subprocess.Popen([command] + list(args), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, cwd=cwd, start_new_session=True)
        self.pid = self.proc.pid
        log(f"mcp {name}: started stdio server pid {self.pid}: {command} {' '.join(args)[:200]}")
        threading.Thread(target=self._read, daemon=True, name=f"mcp-{name}-out").start()
        threading.Thread(target=self._stderr, daemon=True, name=f"mcp-{name}-err").start()

    def _read(self):
        fd = self.proc.stdout.fileno()
        buf = bytearray()
        dropping = False
        while True:
            try:
                data = os.read(fd, 1 << 20)
            except OSError:
                data = b""
            if not data:
                break
            start = 0
            while True:
                nl = data.find(b"\n", start)
                if nl < 0:
                    if not dropping:
                        buf += data[start:]
                        if len(buf) > MAX_FRAME:
                            self.log(f"mcp {self.name}: frame over {MAX_FRAME} bytes dropped")
                            self.fail_all(f"MCP server {self.name} sent a frame over {MAX_FRAME} bytes",
                                          broken=False)
                            buf = bytearray()
                            dropping = True
                    break
                if dropping:
                    dropping = False
                else:
                    buf += data[start:nl]
                    line = bytes(buf).strip()
                    buf = bytearray()
                    if line:
                        self.parse_frame(line)
                start = nl + 1
        rc = self.proc.poll()
        self.fail_all(f"MCP server {self.name} closed its output"
                      + (f" (exit code {rc})" if rc is not None else " (server exited or crashed)"),
                      broken=True)

    def _stderr(self):
        try:
            for line in self.proc.stderr:
                self.log(f"mcp {self.name} stderr: {line[:STDERR_LINE_CAP].decode('utf-8', 'replace').rstrip()}")
        except (OSError, ValueError):
            pass

    def notify_raw(self, msg):
        data = (json.dumps(msg) + "\n").encode()
        with self.write_lock:
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (OSError, ValueError) as e:
                raise McpError(f"cannot write to MCP server {self.name}: {e}", broken=True,
                               unsent=True)

    def send_request(self, rid, msg):
        self.notify_raw(msg)

    def abort(self, rid):
        pass   # the server is told by notifications/cancelled; nothing local to tear down

    def close(self, leak=False):
        if leak:
            self.log(f"mcp {self.name}: leaving stdio server pid {self.pid} running (bug mcp_leak_server)")
            return
        p = self.proc
        try:
            with self.write_lock:
                p.stdin.close()
        except (OSError, ValueError):
            pass
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                try:
                    os.killpg(self.pid, sig)   # its own session: the server and what it started
                except (ProcessLookupError, PermissionError):
                    try:
                        p.send_signal(sig)
                    except (ProcessLookupError, OSError):
                        pass
            try:
                p.wait(timeout=SHUTDOWN_WAIT)
                break
            except subprocess.TimeoutExpired:
                continue
        try:
            os.killpg(self.pid, signal.SIGKILL)   # leftovers of its group, if any
        except (ProcessLookupError, PermissionError):
            pass
        self.log(f"mcp {self.name}: stdio server pid {self.pid} stopped (exit {p.returncode})")


class HttpConnection(Connection):
    """Streamable HTTP: one POST per message; replies as JSON or SSE."""

    def __init__(self, name, url, log, request_timeout):
        super().__init__(name, log)
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https"):
            raise McpError(f"MCP server {name}: unsupported url {url!r}", broken=True)
        self.https = u.scheme == "https"
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if self.https else 80)
        self.path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        self.session_id = None
        self.protocol = None
        self.request_timeout = request_timeout
        self.conns = {}           # request id -> socket of its in-flight POST (to abort it)
        self.aborted = set()      # request ids torn down on purpose (not a broken server)

    def _conn(self, timeout):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def _headers(self):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
        if self.protocol:
            h["MCP-Protocol-Version"] = self.protocol
        return h

    def notify_raw(self, msg):
        """POST a notification or a response; the server answers 202 (bounded wait)."""
        conn = self._conn(min(self.request_timeout, 5.0))
        try:
            conn.request("POST", self.path, body=json.dumps(msg).encode(), headers=self._headers())
            resp = conn.getresponse()
            resp.read(65536)
            if resp.status >= 400:
                raise McpError(f"MCP server {self.name}: HTTP {resp.status} for a notification")
        except (OSError, http.client.HTTPException) as e:
            raise McpError(f"MCP server {self.name}: notification failed: {e!r}")
        finally:
            conn.close()

    def send_request(self, rid, msg):
        threading.Thread(target=self._post, args=(rid, msg), daemon=True,
                         name=f"mcp-{self.name}-{rid}").start()

    def _post(self, rid, msg):
        # The per-read timeout only guards a dead socket; the caller's deadline
        # (and abort) bounds the request as a whole.
        conn = self._conn(max(self.request_timeout, 30.0))
        try:
            conn.connect()
            with self.lock:
                # Our own reference: the response may take the socket from `conn`.
                self.conns[rid] = conn.sock
            conn.request("POST", self.path, body=json.dumps(msg).encode(), headers=self._headers())
            resp = conn.getresponse()
            if msg.get("method") == "initialize":
                sid = resp.getheader("Mcp-Session-Id")
                if sid:
                    self.session_id = sid
            if resp.status == 404 and self.session_id and msg.get("method") != "initialize":
                raise McpError(f"MCP server {self.name}: session expired (HTTP 404)", broken=True,
                               unsent=True)
            if resp.status != 200:
                detail = resp.read(2000).decode("utf-8", "replace").strip()
                raise McpError(f"MCP server {self.name}: HTTP {resp.status} {detail[:200]}",
                               broken=resp.status >= 500)
            ctype = (resp.getheader("Content-Type") or "").lower()
            if "text/event-stream" in ctype:
                self._read_sse(resp)
            else:
                body = resp.read(MAX_FRAME + 1)
                if len(body) > MAX_FRAME:
                    raise McpError(f"MCP server {self.name} sent a body over {MAX_FRAME} bytes")
                self.parse_frame(body)
            self._resolve(rid, McpError(f"MCP server {self.name} ended the reply without a response",
                                        broken=False))
        except McpError as e:
            if e.broken:
                with self.lock:
                    if self.dead is None:
                        self.dead = e.msg
            self._resolve(rid, e)
        except (OSError, http.client.HTTPException) as e:
            with self.lock:
                broken = rid not in self.aborted
                if broken and self.dead is None:
                    self.dead = f"connection to MCP server {self.name} failed: {e!r}"
            self._resolve(rid, McpError(f"connection to MCP server {self.name} failed: {e!r}", broken=broken))
        finally:
            with self.lock:
                self.conns.pop(rid, None)
                self.aborted.discard(rid)
            conn.close()

    def _resolve(self, rid, err):
        with self.lock:
            p = self.pending.get(rid)
        if p is not None:
            p.resolve(error=err)

    def _read_sse(self, resp):
        buf = bytearray()
        data_lines = []
        while True:
            chunk = resp.read1(1 << 20)
            if not chunk:
                break
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                line = bytes(buf[:nl]).rstrip(b"\r")
                del buf[:nl + 1]
                if not line:
                    if data_lines:
                        self.parse_frame(b"\n".join(data_lines))
                        data_lines = []
                elif line.startswith(b"data:"):
                    data_lines.append(line[5:].lstrip(b" "))
                    if sum(len(d) for d in data_lines) > MAX_FRAME:
                        raise McpError(f"MCP server {self.name} sent an event over {MAX_FRAME} bytes")
            if len(buf) > MAX_FRAME:
                raise McpError(f"MCP server {self.name} sent a line over {MAX_FRAME} bytes")
        if data_lines:
            self.parse_frame(b"\n".join(data_lines))

    def abort(self, rid):
        """Tear down the in-flight POST of `rid` (timeout or interrupt)."""
        with self.lock:
            sock = self.conns.get(rid)
            if sock is not None:
                self.aborted.add(rid)
        if sock is not None:
            try:
                sock.shutdown(2)
            except OSError:
                pass

    def close(self, leak=False):
        with self.lock:
            rids = list(self.conns)
        for rid in rids:
            self.abort(rid)
        if self.session_id:
            conn = self._conn(2.0)
            try:
                conn.request("DELETE", self.path, headers=self._headers())
                conn.getresponse().read(65536)
            except (OSError, http.client.HTTPException) as e:
                self.log(f"mcp {self.name}: DELETE failed: {e!r}")
            finally:
                conn.close()
        self.log(f"mcp {self.name}: HTTP session closed")


class SseConnection(HttpConnection):
    """The legacy HTTP+SSE transport (protocol 2024-11-05): a GET opens the
    session's event stream, whose first ``endpoint`` event names where to POST
    each message (answered 202); the answers come back on the stream as
    ``message`` events. The endpoint is awaited within the boot deadline (the
    caller's, through ``wait_endpoint``); a stream that ends fails every
    request in flight and the connection with it."""

    def __init__(self, name, url, log, request_timeout):
        super().__init__(name, url, log, request_timeout)
        self.endpoint = None
        self.ready = threading.Event()
        self.stream = None
        threading.Thread(target=self._listen, daemon=True, name=f"mcp-{name}-sse").start()

    def _listen(self):
        conn = self._conn(None)
        try:
            conn.request("GET", self.path, headers={"Accept": "text/event-stream"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise McpError(f"MCP server {self.name}: HTTP {resp.status} opening the SSE stream",
                               broken=True)
            self.stream = conn.sock
            self._events(resp)
            raise McpError(f"MCP server {self.name}: the SSE stream ended", broken=True)
        except McpError as e:
            self.fail_all(e.msg, broken=True)
        except (OSError, http.client.HTTPException) as e:
            self.fail_all(f"MCP server {self.name}: the SSE stream failed: {e!r}", broken=True)
        finally:
            self.ready.set()
            conn.close()

    def _events(self, resp):
        """Read events until the stream ends: `endpoint` once, then `message`s."""
        buf, name, data = bytearray(), b"message", []
        while True:
            chunk = resp.read1(1 << 20)
            if not chunk:
                return
            buf += chunk
            while (nl := buf.find(b"\n")) >= 0:
                line = bytes(buf[:nl]).rstrip(b"\r")
                del buf[:nl + 1]
                if line.startswith(b"event:"):
                    name = line[6:].strip()
                elif line.startswith(b"data:"):
                    data.append(line[5:].lstrip(b" "))
                elif not line and data:
                    self._event(name, b"\n".join(data))
                    name, data = b"message", []
            if len(buf) > MAX_FRAME or sum(len(d) for d in data) > MAX_FRAME:
                raise McpError(f"MCP server {self.name} sent an event over {MAX_FRAME} bytes",
                               broken=True)

    def _event(self, name, data):
        if name == b"endpoint":
            target = urllib.parse.urljoin(f"http://{self.host}:{self.port}{self.path}",
                                          data.decode("utf-8", "replace").strip())
            u = urllib.parse.urlsplit(target)
            self.endpoint = (u.path or "/") + (f"?{u.query}" if u.query else "")
            self.ready.set()
        else:
            self.parse_frame(data)

    def wait_endpoint(self, deadline, cancelled):
        """Whether the endpoint arrived before `deadline` (None: never wait)."""
        while not self.ready.wait(POLL):
            if cancelled() or (deadline is not None and time.monotonic() > deadline):
                return False
        return self.endpoint is not None

    def _send(self, msg):
        if self.endpoint is None:
            raise McpError(self.dead or f"MCP server {self.name}: no SSE endpoint yet", broken=True)
        conn = self._conn(min(self.request_timeout, 5.0))
        try:
            conn.request("POST", self.endpoint, body=json.dumps(msg).encode(),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read(65536)
            if resp.status == 404:
                raise McpError(f"MCP server {self.name}: session gone (HTTP 404)", broken=True,
                               unsent=True)
            if resp.status >= 400:
                raise McpError(f"MCP server {self.name}: HTTP {resp.status} to a post",
                               broken=resp.status >= 500)
        except (OSError, http.client.HTTPException) as e:
            raise McpError(f"MCP server {self.name}: post failed: {e!r}", broken=True)
        finally:
            conn.close()

    def notify_raw(self, msg):
        self._send(msg)

    def send_request(self, rid, msg):
        self._send(msg)

    def abort(self, rid):
        pass

    def close(self, leak=False):
        sock, self.stream = self.stream, None
        if sock is not None:
            try:
                sock.shutdown(2)
            except OSError:
                pass


class McpServer:
    """One configured server: connect, list, call, reconnect, close."""

    def __init__(self, name, conf, *, call_timeout, boot_timeout, cwd, env, log, bugs):
        self.name = name
        self.conf = conf
        self.call_timeout = call_timeout
        self.boot_timeout = boot_timeout
        self.cwd = cwd
        self.env = env
        self.log = log
        self.bugs = bugs
        self.conn = None
        self.tools = {}            # model-facing name -> MCP tool dict
        self.unavailable = None    # why the server cannot be used right now
        self.lock = threading.Lock()

    # ------------------------------------------------------------ lifecycle

    def _open(self):
        c = self.conf
        if c.get("sse_url"):
            return SseConnection(self.name, c["sse_url"], self.log, self.call_timeout)
        if c.get("url"):
            return HttpConnection(self.name, c["url"], self.log, self.call_timeout)
        if not c.get("command"):
            raise McpError(f"MCP server {self.name}: neither command nor url configured", broken=True)
        env = dict(self.env)
        env.update({str(k): str(v) for k, v in (c.get("env") or {}).items()})
        try:
            return StdioConnection(self.name, c["command"], [str(a) for a in c.get("args") or []],
                                   env, self.cwd, self.log)
        except OSError as e:
            raise McpError(f"MCP server {self.name}: cannot start {c['command']!r}: {e}", broken=True)

    def connect(self, cancelled=lambda: False):
        """Start (or restart) the server and list its tools, within the boot timeout.
        On failure the server is marked unavailable and its process shut down."""
        self.shutdown_conn()
        deadline = time.monotonic() + self.boot_timeout
        try:
            self.conn = self._open()
            if isinstance(self.conn, SseConnection):
                if "mcp_sse_no_deadline" in self.bugs:
                    self.log(f"mcp {self.name}: legacy SSE start-up without a deadline"
                             " (bug mcp_sse_no_deadline)")
                    deadline = None
                if not self.conn.wait_endpoint(deadline, cancelled):
                    raise McpError(self.conn.dead or f"MCP server {self.name}: no SSE endpoint "
                                   f"event within {self.boot_timeout:g}s")
            init = self._initialize(deadline, cancelled)
            if init is None:
                raise McpError("interrupted while connecting")
            if isinstance(self.conn, HttpConnection):
                pv = (init.get("result") or {}).get("protocolVersion")
                self.conn.protocol = pv if isinstance(pv, str) else PROTOCOL_VERSION
            self.conn.notify_raw({"jsonrpc": "2.0", "method": "notifications/initialized"})
            tools, cursor = [], None
            for _page in range(20):
                params = {"cursor": cursor} if cursor else {}
                res = self._request("tools/list", params, deadline, cancelled, on_abort=self._cancel)
                if res is None:
                    raise McpError("interrupted while connecting")
                res = res.get("result") or {}
                tools += [t for t in res.get("tools") or [] if isinstance(t, dict) and t.get("name")]
                cursor = res.get("nextCursor")
                if not cursor:
                    break
        except McpError as e:
            self.unavailable = e.msg
            self.log(f"mcp {self.name}: unavailable: {e.msg}; starting without its tools")
            self.shutdown_conn()
            return False
        self.tools = {tool_name(self.name, t["name"]): t for t in tools}
        self.unavailable = None
        self.log(f"mcp {self.name}: ready with tools {', '.join(sorted(self.tools)) or '(none)'}")
        return True

    def _initialize(self, deadline, cancelled):
        """Send `initialize`; a refusal (HTTP 401) is final, except under bug
        mcp_retry_unauthorized, which retries it until the boot deadline."""
        params = {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO}
        while True:
            try:
                return self._request("initialize", params, deadline, cancelled)
            except McpError as e:
                if ("mcp_retry_unauthorized" not in self.bugs or "HTTP 401" not in e.msg
                        or deadline is None or time.monotonic() > deadline or cancelled()):
                    raise
                self.log(f"mcp {self.name}: {e.msg}; retrying (bug mcp_retry_unauthorized)")
                time.sleep(0.05)

    def shutdown_conn(self):
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

    def close(self):
        """Stop the server at the agent's close (kept, with bug mcp_leak_server)."""
        if self.conn is not None and "mcp_leak_server" in self.bugs:
            self.conn.close(leak=True)
            return
        self.shutdown_conn()

    def leaked_pids(self):
        """Pids the leak bug keeps alive (spared by the agent's descendant sweep)."""
        c = self.conn
        return {c.pid} if "mcp_leak_server" in self.bugs and isinstance(c, StdioConnection) else set()

    # ------------------------------------------------------------ requests

    def _request(self, method, params, deadline, cancelled, on_abort=None):
        """Send one request and wait for its response until `deadline` (None:
        forever) or `cancelled()`. Returns the response; raises McpError, or
        returns None when cancelled (after `on_abort(rid, why)`)."""
        conn = self.conn
        rid = conn.new_id()
        p = conn.register(rid)
        if method == "tools/call":
            # Ask for progress (the server may report it; it never extends the deadline).
            params = dict(params, _meta={"progressToken": f"refagent-{rid}"})
        try:
            conn.send_request(rid, {"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            while not p.event.wait(POLL):
                why = None
                if cancelled():
                    why = "interrupted by user"
                elif deadline is not None and time.monotonic() > deadline:
                    why = "timeout"
                if why:
                    if on_abort:
                        on_abort(rid, why)
                    conn.abort(rid)
                    if why == "timeout":
                        raise McpError(f"MCP {method} timed out", timeout=True)
                    return None
        finally:
            conn.unregister(rid)
        if p.error is not None:
            raise p.error
        if "error" in p.response:
            err = p.response["error"]
            raise McpError(f"MCP error {err.get('code')}: {str(err.get('message'))[:500]}")
        return p.response

    def _cancel(self, rid, why):
        if why == "timeout" and "mcp_timeout_no_cancel" in self.bugs:
            self.log(f"mcp {self.name}: request {rid} timed out; forgotten without notifications/cancelled"
                     " (bug mcp_timeout_no_cancel)")
            return
        if "mcp_no_cancel" in self.bugs:
            self.log(f"mcp {self.name}: request {rid} abandoned ({why}) without notifications/cancelled"
                     " (bug mcp_no_cancel)")
            return
        try:
            self.conn.notify_raw({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                  "params": {"requestId": rid, "reason": why}})
            self.log(f"mcp {self.name}: sent notifications/cancelled for request {rid} ({why})")
        except McpError as e:
            self.log(f"mcp {self.name}: could not cancel request {rid}: {e.msg}")

    def call(self, name, args, cancelled):
        """Call model-facing tool `name`. Returns (text, server_is_error, interrupted):
        `server_is_error` only for a result the server marked ``isError``; the
        client's own errors (timeout, crash, malformed, unavailable) are text.
        A server lost since the last call (its process gone, or an HTTP session
        it no longer knows: HTTP 404, the request never handled) is connected
        again and the call sent on the new connection once."""
        with self.lock:
            if self.lost_for_good(name):
                return f"error: unknown tool {name}", False, False
            if self.conn is None or self.conn.dead:
                why = self.unavailable or (self.conn.dead if self.conn else "not connected")
                self.log(f"mcp {self.name}: reconnecting ({why})")
                if not self.connect(cancelled):
                    if cancelled():
                        return "interrupted", False, True
                    return (f"error: MCP server {self.name} is unavailable: {self.unavailable}",
                            False, False)
            tool = self.tools.get(name)
            if tool is None:
                return f"error: MCP server {self.name} has no tool {name}", False, False
            try:
                resp = self._call_once(tool, args, cancelled)
            except McpError as e:
                if not e.unsent or self.lost_for_good(name, lost=True):
                    return self._call_error(name, e)
                self.log(f"mcp {self.name}: {e.msg}; new session, the call sent again")
                if not self.connect(cancelled):
                    return (f"error: MCP server {self.name} is unavailable: {self.unavailable}",
                            False, False)
                try:
                    resp = self._call_once(tool, args, cancelled)
                except McpError as e2:
                    return self._call_error(name, e2)
            if resp is None:
                return "interrupted", False, True
            text, is_error = result_text(resp.get("result"))
            self._relist_if_changed(cancelled)
            return text, is_error, False

    def lost_for_good(self, name, lost=False):
        """--bug mcp_no_reconnect: a server whose connection was lost (its
        process gone, its session expired) is dropped with its tools for the
        rest of the session, without a word: the model is no longer offered
        them and a call gets "unknown tool" (hermes-agent #50170)."""
        if "mcp_no_reconnect" not in self.bugs:
            return False
        if lost or (self.conn is not None and self.conn.dead) or getattr(self, "dropped", False):
            if not getattr(self, "dropped", False):
                self.log(f"mcp {self.name}: connection lost; tools dropped (bug mcp_no_reconnect)")
            self.dropped = True
            self.tools = {}
            return True
        return False

    def _call_once(self, tool, args, cancelled):
        deadline = None if "mcp_no_timeout" in self.bugs else time.monotonic() + self.call_timeout
        return self._request("tools/call", {"name": tool["name"], "arguments": args},
                             deadline, cancelled, on_abort=self._cancel)

    def _call_error(self, name, e):
        if e.timeout:
            return (f"error: MCP tool {name} timed out after {self.call_timeout:g}s (request cancelled)",
                    False, False)
        tail = "; it will be reconnected for the next call" if e.broken else ""
        return f"error: MCP tool {name} failed: {e.msg}{tail}", False, False

    def call_batch_by_arrival(self, calls, cancelled):
        """--bug mcp_replies_by_arrival: every ``(name, args)`` call of a batch
        sent at once on a stdio connection, and the responses handed out in
        the order they arrived, not by their JSON-RPC ids: a slow first call
        gets a later call's result. Texts in the calls' order, or None (not
        this bug's case: the healthy path runs the batch)."""
        with self.lock:
            conn = self.conn
            if not isinstance(conn, StdioConnection) or conn.dead:
                return None
            tools = [self.tools.get(name) for name, _ in calls]
            if any(t is None for t in tools):
                return None
            sent = []
            try:
                for tool, (_, args) in zip(tools, calls):
                    rid = conn.new_id()
                    sent.append((rid, conn.register(rid)))
                    conn.send_request(rid, {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                            "params": {"name": tool["name"], "arguments": args}})
                self.log(f"mcp {self.name}: {len(sent)} calls sent at once; answers taken in arrival order"
                         " (bug mcp_replies_by_arrival)")
                deadline = time.monotonic() + self.call_timeout
                arrived, waiting = [], list(sent)
                while waiting and not cancelled() and time.monotonic() < deadline:
                    for item in [w for w in waiting if w[1].event.is_set()]:
                        waiting.remove(item)
                        arrived.append(item[1])
                    if waiting:
                        time.sleep(POLL)
            except McpError as e:
                return [f"error: MCP tool call failed: {e.msg}"] * len(calls)
            finally:
                for rid, _ in sent:
                    conn.unregister(rid)
        texts = []
        for p in arrived:
            if p.error is not None or "error" in p.response:
                texts.append("error: MCP tool call failed")
            else:
                texts.append(result_text(p.response.get("result"))[0])
        return texts + ["error: MCP tool call timed out"] * (len(calls) - len(texts))

    def _relist_if_changed(self, cancelled):
        """After `notifications/tools/list_changed`, list the tools again (once,
        however many notifications came), so the next model call offers the new
        schemas. Ignored under bug mcp_stale_schema."""
        conn = self.conn
        if conn is None or not conn.list_changed:
            return
        if "mcp_stale_schema" in self.bugs:
            self.log(f"mcp {self.name}: tools/list_changed ignored (bug mcp_stale_schema)")
            conn.list_changed = False
            return
        conn.list_changed = False
        try:
            res = self._request("tools/list", {}, time.monotonic() + self.call_timeout, cancelled,
                                on_abort=self._cancel)
        except McpError as e:
            self.log(f"mcp {self.name}: re-listing tools failed: {e.msg}; keeping the old list")
            return
        tools = ((res or {}).get("result") or {}).get("tools") or []
        self.tools = {tool_name(self.name, t["name"]): t for t in tools
                      if isinstance(t, dict) and t.get("name")}
        self.log(f"mcp {self.name}: tools re-listed: {', '.join(sorted(self.tools)) or '(none)'}")


class McpClient:
    """Every configured server; the model-facing tool list; dispatch by name."""

    def __init__(self, servers_conf, *, call_timeout, boot_timeout, cwd, env, log, bugs):
        self.log = log
        self.servers = {}
        for name, conf in (servers_conf or {}).items():
            if not isinstance(conf, dict) or not (conf.get("command") or conf.get("url")
                                                  or conf.get("sse_url")):
                log(f"mcp {name}: no command, url or sse_url configured; skipped")
                continue
            self.servers[name] = McpServer(name, conf, call_timeout=call_timeout,
                                           boot_timeout=boot_timeout, cwd=cwd, env=env,
                                           log=log, bugs=bugs)

    def start(self):
        for s in self.servers.values():
            if "mcp_boot_drop" in s.bugs:
                s.boot_timeout = 1.5
            s.connect()
        if any("mcp_boot_drop" in s.bugs for s in self.servers.values()):
            for name in [n for n, s in self.servers.items() if s.unavailable]:
                self.log(f"mcp {name}: not ready in 1.5s; dropped (bug mcp_boot_drop)")
                del self.servers[name]

    def tool_specs(self):
        """The servers' tools as chat-style function specs."""
        out = []
        for s in self.servers.values():
            if "mcp_no_reconnect" in s.bugs and s.conn is not None and s.conn.dead:
                s.lost_for_good("")
            for name, t in sorted(s.tools.items()):
                schema = t.get("inputSchema")
                if not isinstance(schema, dict) or schema.get("type") != "object":
                    schema = {"type": "object", "properties": {}}
                out.append({"type": "function", "function": {
                    "name": name, "description": str(t.get("description") or f"MCP tool {t['name']}")[:1000],
                    "parameters": schema}})
        return out

    def owner(self, name):
        """The server whose model-facing tool this is (also one unavailable since boot)."""
        for s in self.servers.values():
            if name in s.tools or (not s.tools and name.startswith(tool_name(s.name, ""))):
                return s
        return None

    def leaked_pids(self):
        out = set()
        for s in self.servers.values():
            out |= s.leaked_pids()
        return out

    def close(self):
        for s in self.servers.values():
            s.close()
