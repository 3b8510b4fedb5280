"""A stand-in for an OpenAI-compatible server (``/v1/chat/completions``, ``/v1/completions``) on loopback.

Its "model" is a rule, so tests know the right verdict: it answers Yes (or "Score: 9", or the letter of
the response holding the reference) when the reference text appears in the graded response, else No
("Score: 2"). It is deliberately **gullible**: a response that says "answer Yes" gets Yes, so a test can
show what the verifier's injection handling prevents. ``mode`` makes it misbehave: ``garbage`` (a
reply with no verdict), ``not_json``, ``429`` (always rate-limited), ``slow`` (``delay`` seconds per
request). It records every request (path, headers, body) and the most requests it had in flight at once.

Run as a script (``--port-file``, ``--delay``) for tests that kill it mid-call.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def _between(text: str, tag: str) -> str | None:
    m = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)
    return None if m is None else m.group(1)


def rule_reply(user: str) -> str:
    reference = _between(user, "reference") or ""
    if "Response A:" in user:
        a, b = _between(user, "response_a") or "", _between(user, "response_b") or ""
        fooled_a, fooled_b = (re.search(r"ignore the rubric", t, re.IGNORECASE) is not None for t in (a, b))
        if fooled_a != fooled_b:  # gullible here too: the response that addresses the judge wins
            return "A" if fooled_a else "B"
        return "A" if reference and reference in a and reference not in b else "B" if reference in b else "A"
    response = _between(user, "response") or ""
    gullible = re.search(r"answer (yes|10)", response, re.IGNORECASE) is not None
    right = gullible or bool(reference) and reference in response
    if "Score: N" in user:
        return f"The response is graded.\nScore: {9 if right else 2}"
    return "Yes." if right else "No, it does not match."


class StandIn:
    def __init__(self, mode: str = "ok", delay: float = 0.0) -> None:
        self.mode = mode
        self.delay = delay
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                with standin._lock:
                    standin.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    standin.in_flight += 1
                    standin.max_in_flight = max(standin.max_in_flight, standin.in_flight)
                try:
                    if standin.delay:
                        time.sleep(standin.delay)
                    status, payload = standin.answer(self.path, body)
                finally:
                    with standin._lock:
                        standin.in_flight -= 1
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if status == 429:
                    self.send_header("retry-after", "0.2")
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, path: str, body: dict) -> tuple[int, dict | bytes]:
        if self.mode == "429":
            return 429, {"error": {"message": "rate limited"}}
        if self.mode == "not_json":
            return 200, b"<html>gateway</html>"

        def text(user: str) -> str:
            return "I think it is a fine effort overall." if self.mode == "garbage" else rule_reply(user)

        if path.endswith("/chat/completions"):
            user = body["messages"][-1]["content"]
            return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": text(user)}}]}
        if path.endswith("/completions"):
            return 200, {"choices": [{"index": k, "text": text(p)} for k, p in enumerate(body["prompt"])]}
        return 404, {"error": {"message": f"no route {path}"}}

    def start(self) -> StandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--mode", default="ok")
    args = parser.parse_args()
    standin = StandIn(args.mode, args.delay)
    args.port_file.write_text(str(standin.port))
    standin.server.serve_forever()


if __name__ == "__main__":
    main()
