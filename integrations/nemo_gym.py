"""Cohort's verifiers behind NeMo-Gym: a resources server's ``POST /verify`` in front of a Cohort verifier.

NeMo-Gym (and NeMo-RL through it) calls a *resources server* once per rollout with a ``BaseVerifyRequest``
(``responses_create_params``: the prompt as OpenAI Responses input; ``response``: the policy's output as
an OpenAI Responses ``Response``; plus the task's fields, such as ``expected_answer``, or ``code_tests`` for
the code verifier: unit tests in the row schema's form) and reads a
``BaseVerifyResponse``: the request echoed with ``reward``, ``mask_sample``, ``failure_kind`` and
``failure_reason`` (nemo_gym/base_resources_server.py). This process is such a server; each call is one
group of one rollout, scored by a running Cohort verifier (``cohort serve NAME``) through the learner's
client, so retries, failover and the status contract are Cohort's own::

    cohort serve math --port 50051 &
    cohort serve front nemo-gym --verifier math --endpoint 127.0.0.1:50051 --port 8000

Mapping (docs/interop.md has the full table): status OK is ``reward`` with ``mask_sample: false``; any
other status is ``reward: 0.0`` with ``mask_sample: true`` (their consumers drop the sample) and
``failure_kind`` from their shared vocabulary where it has the name (``verifier_error``,
``provider_unavailable``), else namespaced (``cohort:invalid_reference``, ``cohort:verifier_timeout``);
``failure_reason`` is the verifier's detail. ``cohort_status``, ``cohort_verdict``, ``cohort_flags`` and
``cohort_components`` are added, as NeMo-Gym servers add their own fields. A request that is not a
``BaseVerifyRequest`` is HTTP 422. It binds 127.0.0.1 unless ``--host`` says otherwise.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cohort.integrations._common import on_stop_signals, parse_endpoints, reference_of
from cohort.verifiers.base import GroupRequest, Rollout, RolloutResult, RolloutStatus
from cohort.verifiers.blocking import BlockingClient
from cohort.verifiers.client import WeightedVerifier

FAILURE_KINDS = {
    RolloutStatus.VERIFIER_ERROR: "verifier_error",
    RolloutStatus.DEPENDENCY_UNAVAILABLE: "provider_unavailable",
    RolloutStatus.VERIFIER_TIMEOUT: "cohort:verifier_timeout",
    RolloutStatus.INVALID_REFERENCE: "cohort:invalid_reference",
}
"""A masked Cohort status -> NeMo-Gym ``failure_kind`` (their registered name where one fits, else ``cohort:<kind>``)."""

MAX_BODY_BYTES = 16 << 20


class BadRequest(ValueError):
    """Not a ``BaseVerifyRequest`` (HTTP 422)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping)
                       and part.get("type") in ("input_text", "output_text", "text") and isinstance(part.get("text"), str))
    return ""


def prompt_of(params: Any) -> str:
    """The last user message of ``responses_create_params.input`` (a string input is the prompt itself)."""
    if not isinstance(params, Mapping) or "input" not in params:
        raise BadRequest("responses_create_params.input is required")
    given = params["input"]
    if isinstance(given, str):
        return given
    if not isinstance(given, list):
        raise BadRequest("responses_create_params.input must be a string or a list of input items")
    users = [_text(item.get("content")) for item in given if isinstance(item, Mapping) and item.get("role") == "user"]
    return users[-1] if users else ""


def completion_of(response: Any) -> str:
    """The text of the assistant messages of a Responses ``Response`` (``output_text`` parts), concatenated."""
    if not isinstance(response, Mapping) or not isinstance(response.get("output"), list):
        raise BadRequest("response.output is required (an OpenAI Responses Response)")
    return "".join(_text(item.get("content")) for item in response["output"]
                   if isinstance(item, Mapping) and item.get("type") == "message" and item.get("role") == "assistant")


def verify_response(body: Mapping[str, Any], result: RolloutResult) -> dict[str, Any]:
    """A ``BaseVerifyResponse``: the request echoed with the result in NeMo-Gym's fields (and Cohort's own)."""
    ok = result.status is RolloutStatus.OK
    return {**body, "reward": result.reward if ok else 0.0, "mask_sample": not ok,
            "failure_kind": None if ok else FAILURE_KINDS[result.status],
            "failure_reason": None if ok else result.detail or result.status.value,
            "cohort_status": result.status.name, "cohort_verdict": result.verdict.name,
            "cohort_flags": list(result.flags), "cohort_components": dict(result.components)}


class VerifyFront:
    """Turns one ``/verify`` body into one Cohort group and its result into a ``BaseVerifyResponse``."""

    def __init__(self, scorer: BlockingClient, verifier: str, options: Mapping[str, str], answer_field: str,
                 tests_field: str = "code_tests") -> None:
        self.scorer, self.verifier, self.options = scorer, verifier, dict(options)
        self.answer_field, self.tests_field = answer_field, tests_field

    def verify(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, Mapping):
            raise BadRequest("the body must be a JSON object (a BaseVerifyRequest)")
        prompt = prompt_of(body.get("responses_create_params"))
        completion = completion_of(body.get("response"))
        answer = body.get(self.answer_field)
        if answer is not None and not isinstance(answer, (str, int, float)):
            raise BadRequest(f"{self.answer_field} must be a string or a number")
        tests = body.get(self.tests_field) if self.tests_field else None
        try:  # the code verifier's reference: unit tests in the row schema's code_tests form (or its JSON)
            reference = reference_of({"answer": answer, "code_tests": tests})
        except ValueError as exc:
            raise BadRequest(f"{self.tests_field}: {exc}") from None
        group = GroupRequest(self.verifier, (Rollout(0, completion),), reference,
                             str(body.get("response", {}).get("id", "")), prompt, None, self.options)
        (result,) = self.scorer.verify_groups([group])[0].results
        return verify_response(body, result)


def _handler(front: VerifyFront) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/health":
                self._send(200, {"status": "ok", "verifier": front.verifier})
            else:
                self._send(404, {"detail": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._send(413, {"detail": f"body over {MAX_BODY_BYTES} bytes"})
                self.close_connection = True
                return
            raw = self.rfile.read(length)
            if self.path == "/seed_session":
                self._send(200, {})
                return
            if self.path != "/verify":
                self._send(404, {"detail": "not found"})
                return
            try:
                self._send(200, front.verify(json.loads(raw)))
            except (BadRequest, ValueError) as exc:  # json.JSONDecodeError is a ValueError
                self._send(422, {"detail": str(exc)})

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    return Handler


def serve(verifier: str, endpoints: Sequence[str], *, host: str = "127.0.0.1", port: int = 0,
          options: Mapping[str, str] | None = None, answer_field: str = "expected_answer", tests_field: str = "code_tests",
          timeout_s: float = 60.0) -> tuple[ThreadingHTTPServer, BlockingClient]:
    """Start the front (in a daemon thread); returns the HTTP server (``server_address`` has the port) and the scorer."""
    scorer = BlockingClient([WeightedVerifier(verifier, 1.0, tuple(endpoints))], timeout_s=timeout_s)
    try:
        scorer.handshake()
        httpd = ThreadingHTTPServer((host, port), _handler(VerifyFront(scorer, verifier, options or {}, answer_field, tests_field)))
    except BaseException:
        scorer.close()
        raise
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, name="cohort-nemo-gym", daemon=True).start()
    return httpd, scorer


def main(verifier: str, endpoints: Sequence[str], host: str = "127.0.0.1", port: int = 8000,
         port_file: Path | None = None, answer_field: str = "expected_answer", tests_field: str = "code_tests",
         options: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> int:
    """``cohort serve front nemo-gym``: serve ``verifier`` at ``endpoints`` as a NeMo-Gym resources server until
    interrupted; bad input is one line on stderr and 2."""
    try:
        parse_endpoints({verifier: list(endpoints)})
        httpd, scorer = serve(verifier, list(endpoints), host=host, port=port, options=dict(options or {}),
                              answer_field=answer_field, tests_field=tests_field, timeout_s=timeout_s)
    except Exception as exc:  # one line, no traceback: an unreachable verifier, a bad flag, a taken port
        print(f"error: {exc}", file=sys.stderr)
        return 2
    bound = httpd.server_address[1]
    if port_file:
        port_file.write_text(str(bound))
    print(f"NeMo-Gym /verify for Cohort verifier {verifier} on http://{host}:{bound}", flush=True)
    stop = threading.Event()
    on_stop_signals(stop.set)
    try:
        stop.wait()
    finally:
        httpd.shutdown()
        scorer.close()
    return 0
