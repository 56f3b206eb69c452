#!/usr/bin/env python3
"""Conformance of chaosrun's provider wires with the official SDKs.

For each wire and each reply kind of the scenario table, start
``chaosrun serve --wire W --script S`` on loopback and call it with the
official SDK of that wire (``openai`` for openai-chat and openai-responses,
``anthropic``, ``google-genai``), streaming and not. Each case asserts what
the SDK itself makes of the reply: the exact text or tool calls, or the
exception type the kind must produce (rate limit, overloaded, server error,
the CLIENT's own timeout for a hang or a silent/stalled stream, a connection
error when the stream is cut). No retries (max_retries=0 / attempts=1): one
request per case.

Usage: conformance.py CHAOSRUN_BINARY [--wire W]...
Prints one line per case and ends with ``N passed, M failed``; exits 1 on any
failure.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import traceback

import anthropic
import openai
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as gt

NONCE = "N0NCE"
TIMEOUT = 1.0  # the client's own timeout, seconds
WIRES = ["openai-chat", "openai-responses", "anthropic", "gemini"]
TOOL_SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}


# ---- the server ---------------------------------------------------------------

class Server:
    def __init__(self, binary, wire, script):
        self.dir = tempfile.TemporaryDirectory()
        path = os.path.join(self.dir.name, "script.yaml")
        with open(path, "w") as f:
            f.write(script)
        self.proc = subprocess.Popen(
            [binary, "serve", "--wire", wire, "--script", path, "--nonce", NONCE, "--quiet"],
            stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        # "chaosrun provider listening on BASE_URL (WIRE)"
        self.base_url = line.split(" listening on ")[1].split()[0]
        self.root = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        self.dir.cleanup()
        return out


# ---- one call per SDK ---------------------------------------------------------
# Each fills `got` (text, reasoning, calls, events) as the reply arrives, so a
# case can check what came before an exception.

def call_openai_chat(base, stream, got):
    c = openai.OpenAI(base_url=base.base_url, api_key="x", max_retries=0, timeout=TIMEOUT)
    tools = [{"type": "function", "function": {"name": "terminal", "parameters": TOOL_SCHEMA}}]
    msgs = [{"role": "user", "content": "hi"}]
    if not stream:
        r = c.chat.completions.create(model="m", messages=msgs, tools=tools)
        m = r.choices[0].message
        got["text"] = m.content or ""
        got["reasoning"] = getattr(m, "reasoning_content", None) or (m.model_extra or {}).get("reasoning_content", "") or ""
        got["calls"] = [(t.id, t.function.name, t.function.arguments) for t in (m.tool_calls or [])]
        got["terminal"] = r.choices[0].finish_reason
        return
    calls = {}
    for chunk in c.chat.completions.create(model="m", messages=msgs, tools=tools, stream=True):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        d = ch.delta
        got["text"] += d.content or ""
        got["reasoning"] += (d.model_extra or {}).get("reasoning_content") or ""
        for t in d.tool_calls or []:
            e = calls.setdefault(t.index, ["", "", ""])
            if t.id:
                e[0], e[1] = t.id, t.function.name
            e[2] += t.function.arguments or ""
        got["calls"] = [tuple(calls[i]) for i in sorted(calls)]
        if ch.finish_reason:
            got["terminal"] = ch.finish_reason


def call_openai_responses(base, stream, got):
    c = openai.OpenAI(base_url=base.base_url, api_key="x", max_retries=0, timeout=TIMEOUT)
    tools = [{"type": "function", "name": "terminal", "parameters": TOOL_SCHEMA}]
    if not stream:
        r = c.responses.create(model="m", input="hi", tools=tools)
        got["text"] = r.output_text
        for item in r.output:
            if item.type == "function_call":
                got["calls"].append((item.call_id, item.name, item.arguments))
            if item.type == "reasoning":
                got["reasoning"] += "".join(s.text for s in item.summary)
        got["terminal"] = r.status
        return
    calls = {}
    for ev in c.responses.create(model="m", input="hi", tools=tools, stream=True):
        got["events"].append(ev.type)
        if ev.type == "response.output_text.delta":
            got["text"] += ev.delta
        elif ev.type == "response.reasoning_summary_text.delta":
            got["reasoning"] += ev.delta
        elif ev.type == "response.output_item.added" and ev.item.type == "function_call":
            calls[ev.item.id] = [ev.item.call_id, ev.item.name, ""]
        elif ev.type == "response.function_call_arguments.delta":
            calls[ev.item_id][2] += ev.delta
        elif ev.type in ("response.completed", "response.incomplete"):
            got["terminal"] = ev.response.status
            got["completed_text"] = ev.response.output_text
        elif ev.type == "response.failed":
            got["failed"] = ev.response.error.message
        got["calls"] = [tuple(v) for v in calls.values()]


def call_anthropic(base, stream, got):
    c = anthropic.Anthropic(base_url=base.base_url, api_key="x", max_retries=0, timeout=TIMEOUT)
    tools = [{"name": "terminal", "input_schema": TOOL_SCHEMA}]
    msgs = [{"role": "user", "content": "hi"}]
    if not stream:
        r = c.messages.create(model="m", max_tokens=100, messages=msgs, tools=tools)
        for b in r.content:
            if b.type == "text":
                got["text"] += b.text
            elif b.type == "thinking":
                got["reasoning"] += b.thinking
            elif b.type == "tool_use":
                args = b.input if isinstance(b.input, str) else json.dumps(b.input, separators=(",", ":"))
                got["calls"].append((b.id, b.name, args))
        got["terminal"] = r.stop_reason
        return
    blocks = {}
    for ev in c.messages.create(model="m", max_tokens=100, messages=msgs, tools=tools, stream=True):
        got["events"].append(ev.type)
        if ev.type == "content_block_start" and ev.content_block.type == "tool_use":
            blocks[ev.index] = [ev.content_block.id, ev.content_block.name, ""]
        elif ev.type == "content_block_delta":
            d = ev.delta
            if d.type == "text_delta":
                got["text"] += d.text
            elif d.type == "thinking_delta":
                got["reasoning"] += d.thinking
            elif d.type == "input_json_delta":
                blocks[ev.index][2] += d.partial_json
        elif ev.type == "message_delta":
            got["terminal"] = ev.delta.stop_reason
        got["calls"] = [tuple(blocks[i]) for i in sorted(blocks)]


def call_gemini(base, stream, got):
    c = genai.Client(api_key="x", http_options=gt.HttpOptions(
        base_url=base.root, timeout=int(TIMEOUT * 1000),
        retry_options=gt.HttpRetryOptions(attempts=1)))
    config = gt.GenerateContentConfig(
        tools=[gt.Tool(function_declarations=[gt.FunctionDeclaration(
            name="terminal", parameters_json_schema=TOOL_SCHEMA)])],
        automatic_function_calling=gt.AutomaticFunctionCallingConfig(disable=True))

    def take(r):
        for cand in r.candidates or []:
            for p in (cand.content.parts if cand.content else None) or []:
                if p.text:
                    if p.thought:
                        got["reasoning"] += p.text
                    else:
                        got["text"] += p.text
                if p.function_call:
                    fc = p.function_call
                    got["calls"].append((fc.id, fc.name, json.dumps(fc.args, separators=(",", ":"))))
            if cand.finish_reason:
                got["terminal"] = str(cand.finish_reason.value if hasattr(cand.finish_reason, "value") else cand.finish_reason)

    if not stream:
        take(c.models.generate_content(model="gemini-test", contents="hi", config=config))
        return
    for r in c.models.generate_content_stream(model="gemini-test", contents="hi", config=config):
        take(r)


CALLERS = {
    "openai-chat": call_openai_chat,
    "openai-responses": call_openai_responses,
    "anthropic": call_anthropic,
    "gemini": call_gemini,
}


# ---- expected exceptions per wire ---------------------------------------------

def timeout_types(wire):
    """The client's own timeout: the SDK's timeout error, or (inside an
    iterated stream, which the SDKs do not wrap) the HTTP client's."""
    import httpx2
    return {
        "openai-chat": (openai.APITimeoutError, httpx2.TimeoutException),
        "openai-responses": (openai.APITimeoutError, httpx2.TimeoutException),
        "anthropic": (anthropic.APITimeoutError, httpx2.TimeoutException),
        "gemini": (httpx2.TimeoutException,),
    }[wire]


def cut_types(wire):
    """A body cut before its end: a connection error."""
    import httpx2
    return {
        "openai-chat": (openai.APIConnectionError, httpx2.TransportError),
        "openai-responses": (openai.APIConnectionError, httpx2.TransportError),
        "anthropic": (anthropic.APIConnectionError, httpx2.TransportError),
        "gemini": (httpx2.TransportError,),
    }[wire]


def status_types(wire, status):
    if wire.startswith("openai"):
        return {429: openai.RateLimitError, 400: openai.BadRequestError}.get(status, openai.InternalServerError)
    if wire == "anthropic":
        return {429: anthropic.RateLimitError, 529: anthropic.OverloadedError,
                400: anthropic.BadRequestError, 503: anthropic.ServiceUnavailableError}.get(
                    status, anthropic.InternalServerError)
    return genai_errors.ClientError if status < 500 else genai_errors.ServerError


# ---- cases --------------------------------------------------------------------

TEXT = "hello {{nonce}} from the wire"
CASES = []


def case(name, script, streams=(True, False)):
    def wrap(check):
        for s in streams:
            CASES.append((name, script, s, check))
        return check
    return wrap


@case("text", "- reply: {kind: text, text: '%s', reasoning: 'pondering', chunk_chars: 4}\n" % TEXT)
def _text(wire, stream, got, exc):
    assert exc is None, repr(exc)
    assert got["text"] == TEXT.replace("{{nonce}}", NONCE), got
    assert got["reasoning"] == "pondering", got
    assert got["terminal"] in ("stop", "completed", "end_turn", "STOP", "FinishReason.STOP"), got
    if wire == "openai-responses" and stream:
        assert got["completed_text"] == got["text"], got


TOOLS = ("- reply: {kind: tool_call, repeat: 2, calls: [{tool: terminal, args: {command: 'echo {{nonce}}-{{i}}'}}]}\n")


@case("tool_call parallel+repeat", TOOLS)
def _tools(wire, stream, got, exc):
    assert exc is None, repr(exc)
    calls = got["calls"]
    assert len(calls) == 2, calls
    assert len({c[0] for c in calls}) == 2 and all(c[0] for c in calls), calls
    for i, (_, name, args) in enumerate(calls):
        assert name == "terminal", calls
        assert json.loads(args) == {"command": "echo %s-%d" % (NONCE, i)}, calls


TRUNC = "{\"command\": \"echo tr"


@case("tool_call truncated args", "- reply: {kind: tool_call, calls: [{tool: terminal, args: '%s'}]}\n" % TRUNC.replace("'", "''"))
def _trunc(wire, stream, got, exc):
    if wire == "gemini":
        # Gemini's functionCall.args is an object: the verbatim string cannot
        # be one, and the SDK refuses the response rather than invent args.
        import pydantic
        assert isinstance(exc, pydantic.ValidationError), repr(exc)
        assert "function_call.args" in str(exc) or "args" in str(exc), str(exc)
        return
    assert exc is None, repr(exc)
    assert got["calls"] and got["calls"][0][2] == TRUNC, got


@case("error 429 retry_after", "- reply: {kind: error, status: 429, message: 'slow {{nonce}}', retry_after: 1}\n")
def _e429(wire, stream, got, exc):
    assert isinstance(exc, status_types(wire, 429)), repr(exc)
    assert "slow " + NONCE in str(exc), str(exc)
    if wire == "gemini":
        assert (exc.code, exc.status) == (429, "RESOURCE_EXHAUSTED"), (exc.code, exc.status)
        delays = [d.get("retryDelay") for d in exc.details["error"]["details"]]
        assert delays == ["1s"], exc.details
    else:
        assert exc.response.headers.get("retry-after") == "1", exc.response.headers


@case("error 529 overloaded", "- reply: {kind: error, status: 529, message: busy}\n")
def _e529(wire, stream, got, exc):
    assert isinstance(exc, status_types(wire, 529)), repr(exc)


@case("error 503 unavailable", "- reply: {kind: error, status: 503, message: down}\n")
def _e503(wire, stream, got, exc):
    assert isinstance(exc, status_types(wire, 503)), repr(exc)
    if wire == "gemini":
        assert (exc.code, exc.status) == (503, "UNAVAILABLE"), (exc.code, exc.status)


@case("error 400", "- reply: {kind: error, status: 400, message: 'invalid request: messages malformed'}\n")
def _e400(wire, stream, got, exc):
    assert isinstance(exc, status_types(wire, 400)), repr(exc)


@case("error mid-stream", "- reply: {kind: error, status: 500, message: 'broke {{nonce}}', mid_stream: true}\n", streams=(True,))
def _emid(wire, stream, got, exc):
    if wire == "openai-responses":
        # The Responses SDK delivers the failure as an event, not an exception.
        assert exc is None, repr(exc)
        assert got.get("failed") == "broke " + NONCE, got
        assert "response.failed" in got["events"], got
        return
    expected = {
        "openai-chat": openai.APIError,
        "anthropic": anthropic.APIStatusError,
        "gemini": genai_errors.APIError,
    }[wire]
    assert isinstance(exc, expected), repr(exc)
    assert "broke " + NONCE in str(exc), str(exc)


@case("hang", "- reply: {kind: hang}\n")
def _hang(wire, stream, got, exc):
    assert isinstance(exc, timeout_types(wire)), repr(exc)
    assert got["text"] == "", got


@case("silent_after_headers", "- reply: {kind: silent_after_headers}\n")
def _silent(wire, stream, got, exc):
    assert isinstance(exc, timeout_types(wire)), repr(exc)
    assert got["text"] == "", got


@case("stall_mid_stream", "- reply: {kind: stall_mid_stream, chars: 'Thinking {{nonce}}'}\n")
def _stall(wire, stream, got, exc):
    assert isinstance(exc, timeout_types(wire)), repr(exc)
    if stream:
        assert got["text"] == "Thinking " + NONCE, got


@case("drop_mid_stream", "- reply: {kind: drop_mid_stream, chars: 'Partial {{nonce}}'}\n")
def _drop(wire, stream, got, exc):
    assert isinstance(exc, cut_types(wire)), repr(exc)
    assert got["terminal"] is None, got
    if stream:
        assert got["text"] == "Partial " + NONCE, got


@case("raw garbage body", "- reply: {kind: raw, status: 200, content_type: application/json, body: '{not json at all'}\n", streams=(False,))
def _raw(wire, stream, got, exc):
    # Every SDK fails on a body that is not JSON; none returns an answer.
    assert isinstance(exc, ValueError), repr(exc)
    assert got["text"] == "" and not got["calls"], got


# ---- runner -------------------------------------------------------------------

def main(argv):
    binary = argv[1]
    wires = [argv[i + 1] for i, a in enumerate(argv) if a == "--wire"] or WIRES
    passed = failed = 0
    for wire in wires:
        for name, script, stream, check in CASES:
            server = Server(binary, wire, script)
            got = {"text": "", "reasoning": "", "calls": [], "events": [], "terminal": None}
            exc = None
            try:
                CALLERS[wire](server, stream, got)
            except Exception as e:  # noqa: BLE001 - the exception is the result
                exc = e
            finally:
                server.stop()
            label = "%-17s %-26s %-6s" % (wire, name, "stream" if stream else "whole")
            try:
                check(wire, stream, got, exc)
            except AssertionError as e:
                failed += 1
                print("FAIL %s %s" % (label, e))
                if exc is not None and os.environ.get("CONFORMANCE_TRACE"):
                    traceback.print_exception(exc)
                continue
            passed += 1
            outcome = type(exc).__module__.split(".")[0] + "." + type(exc).__name__ if exc else "ok"
            print("ok   %s %s" % (label, outcome))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
