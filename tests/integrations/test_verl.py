"""``cohort.integrations.verl.compute_score`` called exactly as verl 0.9.1 calls a custom reward function,
for math and code rows, against real ``cohort serve`` servers on loopback (code through the sandbox).

verl cannot live in the default venv (verl 0.9.1 pins transformers<5.11), so the default suite reproduces
verl's calls in small harnesses, each a transcription of the verl 0.9.1 source named in its docstring.
The tests marked ``verl`` drive verl's own reward managers instead; they skip without verl and run in
``.venv-verl`` (``scripts/ci-verl``).
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np
import pytest

from cohort.integrations import verl as cv
from cohort.rpc.launch import ServiceProcess
from cohort.verifiers.base import RolloutStatus as S
from cohort.verifiers.client import HandshakeError
from cohort.verifiers.combine import ScoredRollout

pytestmark = pytest.mark.timeout(180)

ADD_TESTS = {"asserts": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]}
# (data_source, ground_truth, extra_info, response, expected score)
ROWS: list[tuple[str, Any, dict, str, float]] = [
    ("openai/gsm8k", "72", {"index": 0}, "so 72 apples: \\boxed{72}", 1.0),
    ("openai/gsm8k", "72", {"index": 0}, "\\boxed{71}", 0.0),
    ("openai/gsm8k", "72", {"index": 0}, "I do not know", 0.0),
    ("openai/gsm8k", 0.5, {"index": 1}, "\\boxed{\\frac{1}{2}}", 1.0),
    ("codegen", json.dumps(ADD_TESTS), {"index": 2}, "```python\ndef add(a, b):\n    return a + b\n```", 1.0),
    ("codegen", json.dumps(ADD_TESTS), {"index": 2}, "def add(a, b):\n    return a * b", 0.5),
    ("codegen", json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}), {"index": 3},
     "a, b = map(int, input().split())\nprint(a + b)", 1.0),
    ("math", "x+1", {"index": 4, "cohort_options": {"math": {"timeout_s": "5"}}}, "\\boxed{1+x}", 1.0),
]
EXPECTED = [r[4] for r in ROWS]


@pytest.fixture(scope="module")
def server():
    with ServiceProcess(["math", "code"], env={"COHORT_SANDBOX_POOL_SIZE": "2", "COHORT_MATH_WORKERS": "1"}) as proc:
        yield proc
    cv.close_clients()


@pytest.fixture(scope="module")
def reward_kwargs(server) -> dict[str, Any]:
    """``reward.custom_reward_function.reward_kwargs`` of a verl config."""
    return {"endpoints": f"math={server.endpoint},code={server.endpoint}",
            "verifier_map": {"openai/gsm8k": "math", "codegen": "code"}}


# ---- verl 0.9.1's calls, transcribed ------------------------------------------------------------


def custom_reward_fn(reward_kwargs: dict[str, Any]):
    """verl/trainer/ppo/reward.py::get_custom_reward_fn + _call_with_kwargs: config kwargs win."""

    def _call_with_kwargs(raw_fn, extra_kwargs, *args, **kwargs):
        return raw_fn(*args, **{**kwargs, **extra_kwargs})

    return partial(_call_with_kwargs, cv.compute_score, dict(reward_kwargs))


def non_tensor_batch(rows=ROWS) -> dict[str, np.ndarray]:
    """DataProto.non_tensor_batch: numpy object arrays, one entry per row."""
    return {"data_source": np.array([r[0] for r in rows], dtype=object),
            "reward_model": np.array([{"ground_truth": r[1], "style": "rule"} for r in rows], dtype=object),
            "extra_info": np.array([dict(r[2]) for r in rows], dtype=object)}


def naive_manager(compute_score, rows=ROWS) -> tuple[list[float], dict[str, list]]:
    """verl/workers/reward_manager/naive.py::NaiveRewardManager.__call__ (per-row call, dict handling)."""
    ntb = non_tensor_batch(rows)
    rewards, reward_extra_info = [], defaultdict(list)
    for i, row in enumerate(rows):
        ground_truth = ntb["reward_model"][i]["ground_truth"]
        data_source = ntb["data_source"][i]
        extra_info = ntb["extra_info"][i]
        extra_info["num_turns"] = None
        extra_info["rollout_reward_scores"] = {}
        score = compute_score(data_source=data_source, solution_str=row[3], ground_truth=ground_truth,
                              extra_info=extra_info)
        if isinstance(score, dict):
            reward = score["score"]
            for key, value in score.items():
                reward_extra_info[key].append(value)
        else:
            reward = score
        rewards.append(reward)
    return rewards, reward_extra_info


def batch_manager(compute_score, rows=ROWS, **manager_reward_kwargs) -> tuple[list[float], dict[str, list]]:
    """verl/workers/reward_manager/batch.py::BatchRewardManager.verify + __call__."""
    ntb = non_tensor_batch(rows)
    ground_truths = [item.get("ground_truth", None) for item in ntb["reward_model"]]
    data_sources = ntb["data_source"]
    rollout_reward_scores = [{} for _ in range(len(rows))]
    extras = ntb["extra_info"]
    for i in range(len(rows)):
        extras[i]["rollout_reward_scores"] = rollout_reward_scores[i]
    scores = compute_score(data_sources=data_sources, solution_strs=[r[3] for r in rows], ground_truths=ground_truths,
                           extra_infos=extras, **manager_reward_kwargs)
    rewards, reward_extra_info = [], defaultdict(list)
    for i in range(len(rows)):
        score = scores[i]
        if isinstance(score, dict):
            reward = score["score"]
            for key, value in score.items():
                reward_extra_info[key].append(value)
        else:
            reward = score
        rewards.append(reward)
    return rewards, reward_extra_info


def reward_loop(compute_score, rows=ROWS) -> list[dict]:
    """verl/experimental/reward_loop/reward_manager/naive.py: one call per sample, from executor threads."""

    def one(i: int) -> dict:
        ntb = non_tensor_batch(rows[i : i + 1])
        extra_info = ntb["extra_info"][0]
        extra_info["num_turns"] = None
        extra_info["rollout_reward_scores"] = {}
        return compute_score(data_source=ntb["data_source"][0], solution_str=rows[i][3],
                             ground_truth=ntb["reward_model"][0]["ground_truth"], extra_info=extra_info)

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(len(rows))))


# ---- tests --------------------------------------------------------------------------------------


def test_per_sample_form_as_the_naive_manager_calls_it(reward_kwargs) -> None:
    rewards, extra = naive_manager(custom_reward_fn(reward_kwargs))
    assert rewards == EXPECTED
    assert set(extra) == {"score", "cohort_status", "cohort_usable"}  # the same keys on every row
    assert extra["cohort_status"] == ["ok"] * len(ROWS) and extra["cohort_usable"] == [1.0] * len(ROWS)


def test_batched_form_as_the_batch_manager_calls_it(reward_kwargs) -> None:
    rewards, extra = batch_manager(custom_reward_fn(reward_kwargs))
    assert rewards == EXPECTED
    assert all(len(v) == len(ROWS) for v in extra.values())
    # BatchRewardManager also passes its own reward_kwargs (config.reward_model.reward_kwargs) straight through
    rewards, _ = batch_manager(cv.compute_score, **reward_kwargs)
    assert rewards == EXPECTED


def test_concurrent_per_sample_calls_share_one_client(reward_kwargs) -> None:
    cv.close_clients()
    before = threading.active_count()
    results = reward_loop(custom_reward_fn(reward_kwargs))
    assert [r["score"] for r in results] == EXPECTED
    assert len(cv._CLIENTS) == 1  # one client (one loop thread) for the process, not one per call
    assert [t.name for t in threading.enumerate()].count("cohort-verifier-loop") == 1
    cv.close_clients()
    assert "cohort-verifier-loop" not in [t.name for t in threading.enumerate()]
    assert threading.active_count() <= before + 1  # grpc may keep one poller thread; no loop threads leak


def test_endpoints_from_the_environment(server, monkeypatch) -> None:
    monkeypatch.setenv("COHORT_VERIFIER_ENDPOINTS", f"math={server.endpoint}")
    out = cv.compute_score("math", "\\boxed{4}", "4", None)  # positional, data_source names the verifier
    assert out == {"score": 1.0, "cohort_status": "ok", "cohort_usable": 1.0}
    out = cv.compute_score(data_source="gsm8k", solution_str="\\boxed{4}", ground_truth=4,
                           extra_info={"cohort_verifier": "math"})
    assert out["score"] == 1.0


def test_failed_verification_is_reported_and_scored_as_documented(server) -> None:
    """The math server dies; its rows come back unusable and scored ``unusable_score``; code rows are untouched."""
    with ServiceProcess(["math"]) as doomed:
        kwargs = {"endpoints": f"math={doomed.endpoint},code={server.endpoint}",
                  "verifier_map": {"openai/gsm8k": "math", "codegen": "code"}, "timeout_s": 5.0, "retries": 1}
        try:
            rewards, _ = batch_manager(custom_reward_fn(kwargs))
            assert rewards == EXPECTED
            doomed.kill()
            rewards, extra = batch_manager(custom_reward_fn(kwargs))
            is_math = [r[0] != "codegen" for r in ROWS]
            assert extra["cohort_status"] == ["dependency_unavailable" if m else "ok" for m in is_math]
            assert extra["cohort_usable"] == [0.0 if m else 1.0 for m in is_math]
            # whole groups failed: no usable row to take a mean from, so unusable_score (0.0); equal scores in a
            # group give a zero GRPO advantage
            assert rewards == [0.0 if m else e for m, e in zip(is_math, EXPECTED)]
            rewards, _ = batch_manager(custom_reward_fn({**kwargs, "unusable_score": -0.25}))
            assert rewards == [-0.25 if m else e for m, e in zip(is_math, EXPECTED)]
            with pytest.raises(cv.VerificationUnavailable, match="dependency_unavailable"):
                batch_manager(custom_reward_fn({**kwargs, "unusable": "raise"}))
            per_sample = cv.compute_score("openai/gsm8k", "\\boxed{72}", "72", {}, **kwargs)
            assert per_sample == {"score": 0.0, "cohort_status": "dependency_unavailable", "cohort_usable": 0.0}
        finally:
            cv.close_clients()


def test_group_mean_fill_gives_the_failed_rows_the_mean_of_their_group() -> None:
    scored = [ScoredRollout(0, 1.0, S.OK, {}), ScoredRollout(1, 0.0, S.VERIFIER_TIMEOUT, {}),
              ScoredRollout(2, 0.0, S.OK, {}), ScoredRollout(3, 0.5, S.OK, {})]
    assert [r["score"] for r in cv.group_scores(scored)] == [1.0, 0.5, 0.0, 0.5]
    assert [r["score"] for r in cv.group_scores(scored, "constant", -1.0)] == [1.0, -1.0, 0.0, 0.5]
    assert [r["cohort_usable"] for r in cv.group_scores(scored)] == [1.0, 0.0, 1.0, 1.0]
    failed = [ScoredRollout(i, 0.0, S.DEPENDENCY_UNAVAILABLE, {}) for i in range(3)]
    assert [r["score"] for r in cv.group_scores(failed, "group_mean", 0.25)] == [0.25] * 3
    with pytest.raises(cv.VerificationUnavailable, match="rollout 1: verifier_timeout"):
        cv.group_scores(scored, "raise")
    # a GRPO group with the filled row: its advantage is 0 and the others' are those of the usable rows alone
    scores = np.array([r["score"] for r in cv.group_scores(scored)])
    usable = scores[[0, 2, 3]]
    assert scores.mean() == pytest.approx(usable.mean()) and scores[1] - scores.mean() == pytest.approx(0.0)


def test_groups_are_rows_of_one_prompt(reward_kwargs) -> None:
    """The batched form groups rows by (data source, reference, extra_info index); a failure in a group is
    filled with that group's mean, never with another prompt's."""
    rows = [("openai/gsm8k", "72", {"index": 0}, "\\boxed{72}", 1.0), ("openai/gsm8k", "7", {"index": 1}, "\\boxed{7}", 1.0)]
    rewards, extra = batch_manager(custom_reward_fn(reward_kwargs), rows=rows)
    assert rewards == [1.0, 1.0] and extra["cohort_status"] == ["ok", "ok"]


def test_bad_input_is_a_clear_error(server, reward_kwargs, monkeypatch) -> None:
    fn = custom_reward_fn(reward_kwargs)
    with pytest.raises(ValueError, match="no Cohort verifier for data_source 'lighteval/MATH'"):
        fn(data_source="lighteval/MATH", solution_str="x", ground_truth="1", extra_info={})
    with pytest.raises(ValueError, match="ground_truth \\['1', '2'\\]"):
        fn(data_source="math", solution_str="x", ground_truth=["1", "2"], extra_info={})
    with pytest.raises(ValueError, match="call-based code tests"):
        fn(data_source="codegen", solution_str="x", ground_truth=json.dumps({"inputs": [[1]], "outputs": [2], "fn_name": "f"}))
    with pytest.raises(ValueError, match="not code tests"):
        fn(data_source="codegen", solution_str="x", ground_truth={"tests": []})
    with pytest.raises(ValueError, match="lengths differ"):
        fn(data_sources=["math"], solution_strs=["a", "b"], ground_truths=["1"], extra_infos=[None])
    with pytest.raises(TypeError, match="not both"):
        fn(data_source="math", solution_str="a", data_sources=["math"], solution_strs=["a"], ground_truths=["1"])
    with pytest.raises(ValueError, match="without an endpoint: \\['format'\\]"):
        cv.compute_score("math", "a", "1", None, **{**reward_kwargs, "verifier_map": {"x": "format"}})
    with pytest.raises(ValueError, match="unusable='zero'"):
        cv.compute_score("math", "a", "1", None, **reward_kwargs, unusable="zero")
    monkeypatch.delenv("COHORT_VERIFIER_ENDPOINTS", raising=False)
    with pytest.raises(ValueError, match="COHORT_VERIFIER_ENDPOINTS"):
        cv.compute_score("math", "a", "1", None)
    with pytest.raises(HandshakeError, match="'format'"):
        cv.compute_score("format", "a", "1", None, endpoints=f"format={server.endpoint}")
    assert fn(data_sources=[], solution_strs=[], ground_truths=[], extra_infos=[]) == []


# ---- verl's own reward managers (verl installed: scripts/ci-verl) -----------------------------------


class ByteTokenizer:
    """What verl's reward managers need of a tokenizer: ``decode`` (UTF-8 bytes as ids, 0 = padding)."""

    pad_token_id = 0
    eos_token = ""

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return bytes(int(i) for i in ids if int(i) != 0).decode()


def data_proto(rows=ROWS):
    """A DataProto as verl's rollout leaves it: left-padded prompts, right-padded responses."""
    import torch
    from verl import DataProto

    tok = ByteTokenizer()
    prompts = [tok.encode(f"question {i}") for i in range(len(rows))]
    responses = [tok.encode(r[3]) for r in rows]
    lp, lr = max(map(len, prompts)), max(map(len, responses))
    p = torch.zeros(len(rows), lp, dtype=torch.long)
    r = torch.zeros(len(rows), lr, dtype=torch.long)
    mask = torch.zeros(len(rows), lp + lr, dtype=torch.long)
    for i, (pi, ri) in enumerate(zip(prompts, responses)):
        p[i, lp - len(pi):] = torch.tensor(pi)
        r[i, : len(ri)] = torch.tensor(ri)
        mask[i, lp - len(pi): lp + len(ri)] = 1
    return DataProto.from_dict(tensors={"prompts": p, "responses": r, "attention_mask": mask,
                                        "input_ids": torch.cat([p, r], dim=1)},
                               non_tensors=non_tensor_batch(rows)), tok, [len(x) for x in responses]


def verl_reward_fn(reward_kwargs: dict[str, Any]):
    """verl's own loader: ``pkg://`` module path, name, reward_kwargs."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": "pkg://cohort.integrations.verl", "name": "compute_score", "reward_kwargs": reward_kwargs}}})
    return get_custom_reward_fn(config)


@pytest.mark.verl
@pytest.mark.parametrize("manager", ["naive", "batch"])
def test_verl_reward_managers(reward_kwargs, manager) -> None:
    pytest.importorskip("verl")
    from verl.workers.reward_manager.batch import BatchRewardManager
    from verl.workers.reward_manager.naive import NaiveRewardManager

    data, tok, lengths = data_proto()
    cls = NaiveRewardManager if manager == "naive" else BatchRewardManager
    out = cls(tokenizer=tok, num_examine=0, compute_score=verl_reward_fn(reward_kwargs))(data, return_dict=True)
    tensor = out["reward_tensor"]
    assert [tensor[i, n - 1].item() for i, n in enumerate(lengths)] == EXPECTED  # the score sits on the last token
    assert tensor.sum().item() == pytest.approx(sum(EXPECTED))
    assert out["reward_extra_info"]["cohort_status"] == ["ok"] * len(ROWS)


@pytest.mark.verl
def test_verl_batch_manager_during_an_outage(server) -> None:
    pytest.importorskip("verl")
    from verl.workers.reward_manager.batch import BatchRewardManager

    with ServiceProcess(["math"]) as doomed:
        kwargs = {"endpoints": f"math={doomed.endpoint},code={server.endpoint}",
                  "verifier_map": {"openai/gsm8k": "math", "codegen": "code"}, "timeout_s": 5.0, "retries": 1}
        try:
            manager = BatchRewardManager(tokenizer=ByteTokenizer(), num_examine=0, compute_score=verl_reward_fn(kwargs))
            data, _, lengths = data_proto()
            tensor = manager(data, return_dict=True)["reward_tensor"]
            assert [tensor[i, n - 1].item() for i, n in enumerate(lengths)] == EXPECTED
            doomed.kill()
            data, _, lengths = data_proto()
            out = manager(data, return_dict=True)
            is_math = [r[0] != "codegen" for r in ROWS]
            got = [out["reward_tensor"][i, n - 1].item() for i, n in enumerate(lengths)]
            assert got == [0.0 if m else e for m, e in zip(is_math, EXPECTED)]
            assert out["reward_extra_info"]["cohort_status"] == ["dependency_unavailable" if m else "ok" for m in is_math]
            assert out["reward_extra_info"]["cohort_usable"] == [0.0 if m else 1.0 for m in is_math]
            cv.close_clients()  # a new client must handshake: a verifier unreachable from the start fails loudly
            with pytest.raises(HandshakeError, match="'math'"):
                manager(data_proto()[0], return_dict=True)
        finally:
            cv.close_clients()


@pytest.mark.verl
def test_verl_reward_loop_as_the_0_9_trainer_runs_it(reward_kwargs) -> None:
    """verl 0.9.1's trainer path: load_reward_manager (reward loop registry) + RewardLoopWorker.compute_score_batch
    (one ``run_single`` task per sample, each calling compute_score in an executor thread)."""
    pytest.importorskip("verl")
    import asyncio

    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import load_reward_manager

    config = OmegaConf.create({"reward": {
        "custom_reward_function": {"path": "pkg://cohort.integrations.verl", "name": "compute_score",
                                   "reward_kwargs": reward_kwargs},
        "reward_manager": {"source": "register", "name": "naive"}, "sandbox_fusion": None}})

    async def compute_score_batch() -> list[dict]:
        manager = load_reward_manager(config, ByteTokenizer())  # built inside the worker's running loop
        data, _, _ = data_proto()
        return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))

    outputs = asyncio.run(compute_score_batch())
    assert [o["reward_score"] for o in outputs] == EXPECTED
    assert [o["reward_extra_info"]["cohort_status"] for o in outputs] == ["ok"] * len(ROWS)
