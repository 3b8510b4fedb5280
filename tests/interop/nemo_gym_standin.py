"""A NeMo-Gym resources server for the `nemo_gym` adapter's tests, written from NeMo-Gym's published schema.

NeMo-Gym itself (`nemo-gym` on PyPI) needs Python >= 3.12 and Ray, so it cannot run in this 3.11 venv; this
server mirrors its `SimpleResourcesServer` contract (nemo_gym/base_resources_server.py, main branch):
`POST /verify` takes a `BaseVerifyRequest` (`responses_create_params`, `response`: an OpenAI Responses
`Response`, validated here with the real `openai` types that NeMo-Gym's models extend) plus the task's own
fields (`expected_answer`, as `resources_servers/equivalence_rule` has it) and answers a `BaseVerifyResponse`
(`reward`, `mask_sample`, `failure_kind`, `failure_reason`). Grading is the `exact` rule of
equivalence_rule (normalised strings equal). Some expected answers make it fail on purpose:

- `MASK:<failure_kind>`: `mask_sample: true` with that kind (a judge down, a lost session, ...);
- `DEGRADED`: `mask_sample: false` with a failure kind (their contract: still a valid measurement), reward 0.5;
- `HTTP500` / `HTTP503`: that status; `SLOW`: answers after 30 s; `NOT_JSON`: a 200 that is not JSON;
  `NO_REWARD`: a 200 with `reward: null`.

With `COHORT_TEST_BROKEN=1` it is deliberately broken, as the conformance kit must catch: every failure above
is scored 0.0 instead (a fake measurement), and a wrong answer gets a random reward in [0, 1) (not deterministic).

Run: `python nemo_gym_standin.py PORT_FILE [PORT]` (binds 127.0.0.1 on PORT, default a free one, writes it to PORT_FILE).
"""

from __future__ import annotations

import os
import random
import re
import socket
import sys
import time

import uvicorn
from fastapi import FastAPI, HTTPException
from fastapi.responses import PlainTextResponse
from openai.types.responses import Response
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import BaseModel, ConfigDict, TypeAdapter

CREATE_PARAMS = TypeAdapter(ResponseCreateParamsNonStreaming)
BROKEN = os.environ.get("COHORT_TEST_BROKEN") == "1"


class VerifyRequest(BaseModel):  # BaseVerifyRequest + equivalence_rule's task field
    model_config = ConfigDict(extra="allow")
    responses_create_params: dict
    response: Response
    expected_answer: str


def _normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower())


app = FastAPI()


@app.post("/verify")
def verify(body: VerifyRequest):
    CREATE_PARAMS.validate_python(body.responses_create_params)
    if "input" not in body.responses_create_params:
        raise HTTPException(422, "responses_create_params.input is required")
    text = "".join(c.text for o in body.response.output if o.type == "message" for c in o.content
                   if c.type == "output_text")
    echo = body.model_dump(mode="json")
    gold = body.expected_answer
    if BROKEN and (gold.startswith("MASK:") or gold in ("HTTP500", "HTTP503", "NOT_JSON", "NO_REWARD")):
        return {**echo, "reward": 0.0, "mask_sample": False}  # a failure passed off as a measurement
    if BROKEN and _normalize(text) != _normalize(gold):
        return {**echo, "reward": random.random(), "mask_sample": False}
    if gold.startswith("MASK:"):
        return {**echo, "reward": 0.0, "mask_sample": True, "failure_kind": gold[5:], "failure_reason": "standin"}
    if gold == "DEGRADED":
        return {**echo, "reward": 0.5, "mask_sample": False, "failure_kind": "judge_unparseable",
                "failure_reason": "retried the judge once"}
    if gold in ("HTTP500", "HTTP503"):
        raise HTTPException(int(gold[4:]), "standin failure")
    if gold == "SLOW":
        time.sleep(30)
    if gold == "NOT_JSON":
        return PlainTextResponse("oops")
    if gold == "NO_REWARD":
        return {**echo, "reward": None}
    return {**echo, "reward": float(_normalize(text) == _normalize(gold)), "mask_sample": False}


def main() -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(sys.argv[2]) if len(sys.argv) > 2 else 0))
    with open(sys.argv[1], "w") as fh:
        fh.write(str(sock.getsockname()[1]))
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
