"""An OpenEnv environment served by OpenEnv's own server (`openenv.core.env_server.create_app`), for the
`openenv` adapter's tests.

`Arithmetic`: a single-turn environment. `reset(seed=..., index=..., question=..., answer=...)` picks the
task (index into TASKS, else seed modulo its length, or the given question and answer); one `step` with
`ArithmeticAction(message=...)` ends the episode with reward 1.0 for the right answer, else 0.0. Some
messages fail on purpose: `RAISE` raises inside `step` (their server sends an `EXECUTION_ERROR` frame),
`NO_REWARD` ends without a reward, `NOT_DONE` gives a reward but does not end the episode, `SLOW` answers
after 30 s, `BOOL` gives the reward `True`. `reset(index=99)` raises (no such task).

With `COHORT_TEST_BROKEN=1` it is deliberately broken, as the conformance kit must catch: every failure above
is scored 0.0 instead (a fake measurement), and a wrong answer gets a random reward in [0, 1) (not deterministic).

Run: `python openenv_env.py PORT_FILE [PORT]` (binds 127.0.0.1 on PORT, default a free one, writes it to
PORT_FILE once bound). uvicorn is started directly on their ASGI app.
"""

from __future__ import annotations

import os
import random
import socket
import sys
import time
from typing import Any

import uvicorn
from openenv.core.env_server import Action, Environment, Observation, State, create_app

BROKEN = os.environ.get("COHORT_TEST_BROKEN") == "1"
TASKS = [{"question": "What is 2+2?", "answer": "4"}, {"question": "What is 3*5?", "answer": "15"}]


class ArithmeticAction(Action):
    message: str


class ArithmeticObservation(Observation):
    question: str = ""
    feedback: str = ""


class Arithmetic(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self.task = TASKS[0]

    def reset(self, seed: int | None = None, episode_id: str | None = None, index: int | None = None,
              question: str | None = None, answer: str | None = None, **kwargs: Any) -> ArithmeticObservation:
        if answer is not None:
            self.task = {"question": question or "?", "answer": str(answer)}
        elif index is not None:
            if not 0 <= index < len(TASKS):
                raise IndexError(f"no task {index} (there are {len(TASKS)})")
            self.task = TASKS[index]
        else:
            self.task = TASKS[(seed or 0) % len(TASKS)]
        self._state = State(episode_id=episode_id, step_count=0)
        return ArithmeticObservation(question=self.task["question"])

    def step(self, action: ArithmeticAction, timeout_s: float | None = None, **kwargs: Any) -> ArithmeticObservation:
        self._state.step_count += 1
        text = action.message
        right = text.strip() == self.task["answer"]
        if BROKEN and text in ("RAISE", "NO_REWARD", "NOT_DONE"):
            return ArithmeticObservation(question=self.task["question"], reward=0.0, done=True)
        if BROKEN and not right:
            return ArithmeticObservation(question=self.task["question"], reward=random.random(), done=True)
        if text == "RAISE":
            raise RuntimeError("environment failure on purpose")
        if text == "SLOW":
            time.sleep(30)
        if text == "NO_REWARD":
            return ArithmeticObservation(question=self.task["question"], done=True)
        if text == "BOOL":
            return ArithmeticObservation(question=self.task["question"], reward=True, done=True)
        return ArithmeticObservation(question=self.task["question"], feedback="right" if right else "wrong",
                                     reward=float(right), done=text != "NOT_DONE")

    @property
    def state(self) -> State:
        return self._state


def main() -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(sys.argv[2]) if len(sys.argv) > 2 else 0))
    app = create_app(Arithmetic, ArithmeticAction, ArithmeticObservation, env_name="arithmetic", max_concurrent_envs=32)
    with open(sys.argv[1], "w") as fh:
        fh.write(str(sock.getsockname()[1]))
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
