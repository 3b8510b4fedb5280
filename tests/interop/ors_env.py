"""An Open Reward Standard environment served by the `openreward` SDK's own `Server` (the `ors` adapter's tests).

One single-turn environment, `arithmetic`: tasks `{"question", "answer"}` in split `test`; the terminal tool
`answer` (the harness sends the final assistant message to it) gives reward 1.0 for the right answer, else
0.0. Some answers make the environment fail on purpose: `RAISE` raises inside the tool (the server sends an
SSE `error` event), `NO_REWARD` returns a finished output without a reward. A second environment, `chat`,
has no terminal tool.

With `COHORT_TEST_BROKEN=1` it is deliberately broken, as the conformance kit must catch: every failure above
is scored 0.0 instead (a fake measurement), and a wrong answer gets a random reward in [0, 1) (not deterministic).

Run: `python ors_env.py PORT_FILE [PORT]` (binds 127.0.0.1 on PORT, default a free one, writes it to PORT_FILE). uvicorn is
started directly on the SDK's ASGI app (`Server(...).app`): `Server.run` also checks PyPI for updates.
"""

from __future__ import annotations

import os
import random
import socket
import sys

import uvicorn
from openreward.environments import Environment, Server, TextBlock, ToolOutput, terminal, tool
from pydantic import BaseModel

BROKEN = os.environ.get("COHORT_TEST_BROKEN") == "1"
TASKS = [{"question": "What is 2+2?", "answer": "4"}, {"question": "What is 3*5?", "answer": "15"}]


class Answer(BaseModel):
    answer: str


class Arithmetic(Environment):
    @classmethod
    def list_splits(cls):
        return ["test"]

    @classmethod
    def list_tasks(cls, split: str):
        return TASKS

    def get_prompt(self):
        return [TextBlock(text=self.task_spec["question"])]

    @terminal
    @tool
    def answer(self, args: Answer) -> ToolOutput:
        right = args.answer.strip() == str(self.task_spec["answer"])
        if BROKEN and args.answer in ("RAISE", "NO_REWARD"):
            return ToolOutput(blocks=[TextBlock(text="wrong")], reward=0.0, finished=True)
        if BROKEN and not right:
            return ToolOutput(blocks=[TextBlock(text="?")], reward=random.random(), finished=True)
        if args.answer == "RAISE":
            raise RuntimeError("environment failure on purpose")
        if args.answer == "NO_REWARD":
            return ToolOutput(blocks=[TextBlock(text="no grade")], finished=True)
        return ToolOutput(blocks=[TextBlock(text="right" if right else "wrong")], reward=float(right), finished=True)


class Chat(Environment):
    @classmethod
    def list_splits(cls):
        return ["test"]

    @classmethod
    def list_tasks(cls, split: str):
        return TASKS

    def get_prompt(self):
        return [TextBlock(text="hello")]

    @tool
    def say(self, args: Answer) -> ToolOutput:
        return ToolOutput(blocks=[TextBlock(text=args.answer)], reward=0.0)


def main() -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(sys.argv[2]) if len(sys.argv) > 2 else 0))
    server = Server([Arithmetic, Chat])
    with open(sys.argv[1], "w") as fh:
        fh.write(str(sock.getsockname()[1]))
    uvicorn.Server(uvicorn.Config(server.app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
