#!/usr/bin/env python3
"""A baseline for benches/provider.rs: the same two answers as the chaosrun
provider's bench scripts (an OpenAI-shaped 500, or a streamed text answer),
served by the standard library's ThreadingHTTPServer with HTTP/1.1 keep-alive.

    fake_provider.py PORT error|text

Prints `fake provider listening on http://127.0.0.1:PORT/v1` once bound and,
on SIGTERM or SIGINT, `requests: N`.
"""

import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = "error"
COUNT = 0
COUNT_LOCK = threading.Lock()
TEXT = "The quick brown fox jumps over the lazy dog, then rests a while."


def sse_text(model):
    created = int(time.time())

    def chunk(delta, finish=None, usage=None):
        c = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if usage is not None:
            c["usage"] = usage
        return "data: " + json.dumps(c) + "\n\n"

    parts = [chunk({"role": "assistant", "content": ""})]
    for i in range(0, len(TEXT), 16):
        parts.append(chunk({"content": TEXT[i : i + 16]}))
    usage = {"prompt_tokens": 10, "completion_tokens": 16, "total_tokens": 26}
    parts.append(chunk({}, "stop", usage))
    parts.append("data: [DONE]\n\n")
    return "".join(parts).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without this, Nagle plus delayed
    # ACKs would add ~40 ms per request and make the baseline unfairly slow.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def do_POST(self):
        global COUNT
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        with COUNT_LOCK:
            COUNT += 1
        if MODE == "error":
            payload = json.dumps(
                {"error": {"message": "chaosrun injected error", "type": "server_error", "code": "server_error"}}
            ).encode()
            self.send_response(500)
            self.send_header("content-type", "application/json")
        else:
            payload = sse_text(body.get("model") or "fake")
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def main():
    global MODE
    port = int(sys.argv[1])
    MODE = sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True

    def stop(_sig, _frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"fake provider listening on http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    server.serve_forever()
    print(f"requests: {COUNT}", flush=True)


if __name__ == "__main__":
    main()
