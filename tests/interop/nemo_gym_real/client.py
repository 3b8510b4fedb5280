"""NeMo-Gym's own client calling a Cohort front: nemo-gym 0.4.0's `ServerClient.post(server_name, "/verify", json=
BaseVerifyRequest)`, the call their agents make to a resources server, for tests/interop/test_nemo_gym_real.py.

Run with the NeMo-Gym venv's Python: ``python client.py HOST PORT CASES_JSON``, CASES_JSON a list of
``[completion, expected_answer]``. Each request is built with their pydantic request models; each answer is read
with their ``BaseVerifyResponse`` (it must validate) and printed as one JSON line of what it carries.
"""

import asyncio
import json
import sys

from omegaconf import OmegaConf

from nemo_gym.base_resources_server import BaseVerifyRequest, BaseVerifyResponse
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.openai_utils import NeMoGymResponse, NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.server_utils import ServerClient


def request(completion: str, expected: str) -> dict:
    params = NeMoGymResponseCreateParamsNonStreaming(input=[{"role": "user", "content": "What is 2+2?"}])
    response = NeMoGymResponse.model_validate({
        "id": "resp_1", "created_at": 0, "model": "policy", "object": "response", "parallel_tool_calls": False,
        "tool_choice": "auto", "tools": [],
        "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": completion, "annotations": []}]}]})
    body = BaseVerifyRequest(responses_create_params=params, response=response).model_dump(mode="json",
                                                                                            exclude_unset=True)
    return {**body, "expected_answer": expected}


async def main() -> None:
    host, port, cases = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    del sys.argv[1:]  # their request path reads a Hydra global config, which parses the command line
    client = ServerClient(head_server_config=BaseServerConfig(host="127.0.0.1", port=1),
                          global_config_dict=OmegaConf.create(
                              {"cohort": {"resources_servers": {"cohort": {"host": host, "port": port}}}}))
    for completion, expected in cases:
        resp = await client.post(server_name="cohort", url_path="/verify", json=request(completion, expected))
        raw = await resp.json()
        parsed = BaseVerifyResponse.model_validate(raw)
        print(json.dumps({"http": resp.status, "reward": parsed.reward, "mask_sample": raw.get("mask_sample"),
                          "failure_kind": raw.get("failure_kind")}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
