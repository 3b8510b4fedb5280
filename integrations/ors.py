"""Cohort's verifiers behind the Open Reward Standard: task rows served as an ORS environment.

The environment runs in the ``openreward`` SDK's own ``Server`` (extra ``interop-test`` pins it; nothing
here re-implements their protocol): its tasks are Cohort task rows (split ``train``, in file order, each
a ``task_spec`` with the row's prompt, reference (its answer, or its ``code_tests``) and verifier options), its prompt is the row's prompt, and
its ``@terminal`` tool ``answer`` (the harness sends the final assistant message there) scores the
message with a running Cohort verifier (``cohort serve NAME``) through the learner's client::

    cohort serve math --port 50051 &
    cohort serve front ors --rows rows.jsonl --verifier math --endpoint 127.0.0.1:50051 --port 8080

Status OK is ``ToolOutput.reward`` (``finished: true``; ``metadata`` carries ``cohort_status``,
``cohort_verdict``, ``cohort_flags``). ORS has no field for a masked reward, so any other status fails
the tool call (their SSE ``error`` event) with ``cohort_status=<STATUS>: <detail>``: a harness gets an
error, never a reward of 0, and Cohort's own ``ors`` adapter reads the status back. Binds 127.0.0.1
unless ``--host`` says otherwise; ``uvicorn`` is started directly on the SDK's ASGI app (their
``Server.run`` also checks PyPI for updates).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cohort.integrations._common import on_stop_signals, parse_endpoints, reference_of, task_view
from cohort.verifiers.base import GroupRequest, Rollout, RolloutStatus
from cohort.verifiers.blocking import BlockingClient
from cohort.verifiers.client import WeightedVerifier
from cohort.verifiers.interop.remote import COHORT_STATUS
from cohort.verifiers.records import Task, read_tasks


class Unscored(RuntimeError):
    """The Cohort verifier could not judge (a masked status): the tool call fails instead of giving a reward."""


def environment(tasks: Sequence[Task], scorer: BlockingClient, verifier: str, name: str = "cohort") -> type:
    """An ``openreward`` ``Environment`` class over ``tasks``, scoring with ``verifier`` through ``scorer``."""
    from openreward.environments import Environment, TextBlock, ToolOutput, terminal, tool
    from pydantic import BaseModel

    specs = [task_view(t, verifier) for t in tasks]

    class Answer(BaseModel):
        answer: str

    def list_splits(cls):
        return ["train"]

    def list_tasks(cls, split: str):
        return specs if split == "train" else []

    def get_prompt(self):
        return [TextBlock(text=str(self.task_spec.get("prompt", "")))]

    def answer(self, args: Answer) -> ToolOutput:
        spec = self.task_spec
        group = GroupRequest(verifier, (Rollout(0, args.answer),), reference_of(spec),
                             str(spec.get("id", "")), str(spec.get("prompt", "")), None, dict(spec.get("options") or {}))
        (result,) = scorer.verify_groups([group])[0].results
        if result.status is not RolloutStatus.OK:
            raise Unscored(f"{COHORT_STATUS}{result.status.name}: {result.detail}")
        return ToolOutput(blocks=[TextBlock(text=f"reward {result.reward:g}")], reward=result.reward, finished=True,
                          metadata={"cohort_status": "OK", "cohort_verdict": result.verdict.name,
                                    "cohort_flags": list(result.flags)})

    answer.__annotations__ = {"args": Answer, "return": ToolOutput}
    namespace = {"list_splits": classmethod(list_splits), "list_tasks": classmethod(list_tasks),
                 "get_prompt": get_prompt, "answer": terminal(tool(answer))}
    return type(name, (Environment,), namespace)


def main(rows: Path, verifier: str, endpoints: Sequence[str], name: str = "cohort", host: str = "127.0.0.1",
         port: int = 8080, port_file: Path | None = None, timeout_s: float = 60.0) -> int:
    """``cohort serve front ors``: serve ``rows`` as the ORS environment ``name``, scored by ``verifier`` at
    ``endpoints``, until interrupted; bad input is one line on stderr and 2."""
    try:
        import uvicorn
        from openreward.environments import Server
    except ImportError as exc:
        print(f"error: cohort serve front ors needs the openreward SDK ({exc.name} is not installed): "
              "pip install 'cohort-rl[interop-test]'", file=sys.stderr)
        return 2
    try:
        parse_endpoints({verifier: list(endpoints)})
        tasks = read_tasks(rows)
        scorer = BlockingClient([WeightedVerifier(verifier, 1.0, tuple(endpoints))], timeout_s=timeout_s)
        scorer.handshake()
        server = Server([environment(tasks, scorer, verifier, name)])
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except Exception as exc:  # one line, no traceback: no SDK, bad rows, an unreachable verifier, a taken port
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if port_file:
        port_file.write_text(str(sock.getsockname()[1]))
    print(f"ORS environment {name!r} ({len(tasks)} tasks) for Cohort verifier {verifier} on "
          f"http://{host}:{sock.getsockname()[1]}", flush=True)
    try:
        on_stop_signals(lambda: None)  # uvicorn stops on them; then main returns 0
        uvicorn.Server(uvicorn.Config(server.app, log_level="warning")).run(sockets=[sock])
    finally:
        scorer.close()
    return 0
