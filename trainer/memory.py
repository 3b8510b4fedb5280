"""A memory plan before anything loads (``cohort plan``): the peak of one learner step, by part, from the model's
``config.json`` alone, the device and the batch.

The parts, for P parameters of which P_t are trained (all, or LoRA's adapters), mb rows of L tokens a micro-batch:

- weights: P x master bytes (4 under ``float32`` and ``bfloat16``, 2 under ``bfloat16-pure``);
- compute copy: under ``bfloat16`` autocast casts each weight to bf16 once per forward and keeps the cast until
  the backward is done: P x 2 (FSDP2 all-gathers that copy itself, a layer at a time);
- gradients and optimizer: P_t x master bytes, and AdamW's two moments, P_t x 2 x master bytes;
- activations: what autograd keeps for the backward, per token and layer (``ACTIVATION_FACTORS``: multiples of the
  hidden and intermediate widths, calibrated against measured peaks in ``bench/learner_memory.py``), in the
  compute dtype; with gradient checkpointing each layer keeps its input only, plus one layer's worth recomputed;
- logits: the LM head in chunks (``forward.HEAD_CHUNK_ELEMENTS`` logits at a time, a few float32 temporaries);
- reference: a frozen copy in the compute dtype when ``grpo.beta > 0`` (none with LoRA: the base is the reference);
- engine: the transformers engine's KV cache for B rows of L tokens, alive while it generates (not during the
  update, so the peak takes the larger of the two).

Estimates, not measurements: the plan is checked against a measured CPU peak within 20 % at a Qwen2.5-0.5B
geometry (``bench/learner_memory.py``); on a GPU, the allocator's fragmentation and the CUDA context come on top
(``RUNTIME_BYTES``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cohort.trainer.config import TrainConfig

GIB = 1 << 30
HEAD_TEMPORARIES = 4
"""float32 (chunk, V) tensors alive at once in one chunk of the head: logits, their softmax, the product and the
gradient."""
RUNTIME_BYTES = {"cuda": 1 << 30, "cpu": 0}
"""What the process holds besides the plan's parts: CUDA's context and allocator slack (the CPU's interpreter and
libraries are left out: the bench compares against the peak above the process's own baseline)."""
ACTIVATION_FACTORS = (18.0, 4.0)
"""Elements kept per token and layer for the backward: 18 x hidden (norm inputs and outputs, attention's q, k, v,
output and the residuals, RMSNorm's float32 intermediates) + 4 x intermediate (gate, up, the activation, its
product)."""


@dataclass(frozen=True)
class Geometry:
    """What the plan needs of a decoder-only transformer's ``config.json``."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    qkv_bias: bool = False

    @classmethod
    def of(cls, config: dict[str, Any]) -> Geometry:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return cls(vocab=int(config["vocab_size"]), hidden=hidden, intermediate=int(config["intermediate_size"]),
                   layers=int(config["num_hidden_layers"]), heads=heads,
                   kv_heads=int(config.get("num_key_value_heads") or heads),
                   head_dim=int(config.get("head_dim") or hidden // heads),
                   tied=bool(config.get("tie_word_embeddings", False)),
                   qkv_bias=config.get("model_type") in ("qwen2",) or bool(config.get("attention_bias", False)))

    def linears(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer of one decoder layer."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q_proj": (self.hidden, q), "k_proj": (self.hidden, kv), "v_proj": (self.hidden, kv),
                "o_proj": (q, self.hidden), "gate_proj": (self.hidden, self.intermediate),
                "up_proj": (self.hidden, self.intermediate), "down_proj": (self.intermediate, self.hidden)}

    def parameters(self) -> int:
        per_layer = sum(i * o for i, o in self.linears().values()) + 2 * self.hidden
        if self.qkv_bias:
            per_layer += (self.heads + 2 * self.kv_heads) * self.head_dim
        head = 0 if self.tied else self.vocab * self.hidden
        return self.vocab * self.hidden + head + self.layers * per_layer + self.hidden

    def lora_parameters(self, rank: int, targets: list[str] | str) -> int:
        names = self.linears() if targets == "all-linear" else {k: v for k, v in self.linears().items()
                                                                  if any(k.endswith(t) for t in targets)}
        return self.layers * sum(rank * (i + o) for i, o in names.values())


@dataclass
class Plan:
    """Bytes by part, the micro-batch, and the device's memory."""

    parts: dict[str, int]
    micro_batch: int
    tokens: int
    """Tokens of one micro-batch (rows x (prompt + completion))."""
    device: str
    device_bytes: int | None
    notes: list[str] = field(default_factory=list)

    @property
    def peak(self) -> int:
        """The steady state (AdamW's moments exist from the first step on): what stays resident, plus the largest
        of the backward's start (every activation, a chunk of logits, the head's gradient, which comes first),
        its end (every gradient) and generation (the engine's KV cache; gradients are freed between rounds)."""
        transient = ("activations", "logits", "gradients", "head gradient", "engine")
        static = sum(v for k, v in self.parts.items() if k not in transient)
        part = self.parts.get
        backward = part("activations", 0) + part("logits", 0) + part("head gradient", 0)
        return static + max(backward, part("gradients", 0), part("engine", 0))

    def fits(self) -> bool:
        return self.device_bytes is None or self.peak <= self.device_bytes

    def lines(self) -> list[str]:
        out = [f"{k:>13}  {v / GIB:8.2f} GiB" for k, v in self.parts.items()]
        out.append(f"{'peak':>13}  {self.peak / GIB:8.2f} GiB  (resident + max(backward, gradients, generation))")
        room = "unknown" if self.device_bytes is None else f"{self.device_bytes / GIB:.1f} GiB"
        out.append(f"micro-batch: {self.micro_batch} rows ({self.tokens} tokens); device {self.device}: {room}"
                   + ("" if self.fits() else "  DOES NOT FIT"))
        return out + self.notes


def model_config(cfg: TrainConfig) -> dict[str, Any]:
    """The configured model's ``config.json`` (the tiny model's from its spec; a named model's from its cache,
    converting it once)."""
    m = cfg.model
    if m.tiny is not None:
        from cohort.trainer.models import CHARS, SPECIALS

        t = m.tiny
        return {"vocab_size": len(SPECIALS) + len(CHARS), "hidden_size": t.hidden_size,
                "intermediate_size": t.intermediate_size, "num_hidden_layers": t.num_hidden_layers,
                "num_attention_heads": t.num_attention_heads, "tie_word_embeddings": False, "model_type": "llama",
                "max_position_embeddings": t.max_position_embeddings}
    path = m.path
    if m.name is not None:
        from cohort.trainer.gguf_models import named_model_folder

        path = str(named_model_folder(m.name))
    file = Path(path) / "config.json"
    if not file.exists():
        raise ValueError(f"model.path={path}: no config.json there")
    return json.loads(file.read_text())


def plan(cfg: TrainConfig, config: dict[str, Any], device: str, device_bytes: int | None,
         prompt_tokens: int = 256) -> Plan:
    """The plan of ``cfg`` for a model of ``config`` on ``device`` (``cpu`` or ``cuda``), prompts of
    ``prompt_tokens`` tokens."""
    from cohort.trainer.forward import HEAD_CHUNK_ELEMENTS, micro_batch
    from cohort.trainer.precision import resolve

    import torch

    g = Geometry.of(config)
    precision = resolve(cfg.model.dtype, torch.device(device))
    master, compute = precision.master.itemsize, precision.compute.itemsize
    n = g.parameters()
    lora = cfg.model.lora
    trained = n if lora is None else g.lora_parameters(lora.rank, lora.target_modules)
    width = prompt_tokens + cfg.rollout.max_completion_length
    mb = micro_batch(cfg.optim, width, cfg.batch_size)
    tokens = mb * width
    kept = ACTIVATION_FACTORS[0] * g.hidden + ACTIVATION_FACTORS[1] * g.intermediate  # elements per token and layer
    if cfg.optim.gradient_checkpointing:
        activations = tokens * (g.layers * g.hidden + kept) * compute  # each layer's input, one layer recomputed
    else:
        activations = tokens * g.layers * kept * compute
    chunk = max(1, HEAD_CHUNK_ELEMENTS // g.vocab)
    parts = {
        "weights": n * master + (trained * master if lora is not None else 0),
        "compute copy": n * compute if precision.mixed else 0,
        "gradients": trained * master,
        "optimizer": 2 * trained * master,
        "activations": int(activations),
        "logits": min(chunk, tokens) * g.vocab * 4 * HEAD_TEMPORARIES,
        "head gradient": g.vocab * g.hidden * master if lora is None else 0,
        "reference": n * compute if cfg.grpo.beta > 0 and lora is None else 0,
        "engine": (cfg.batch_size * width * g.layers * 2 * g.kv_heads * g.head_dim * compute
                   if cfg.rollout.engine == "transformers" and not cfg.rollout.max_staleness else 0),
        "runtime": RUNTIME_BYTES.get(device, 0),
    }
    notes = []
    if lora is not None:
        notes.append(f"LoRA rank {lora.rank}: {trained:,} of {n:,} parameters trained")
    return Plan(parts, mb, tokens, device, device_bytes, notes)


def largest_budget_that_fits(cfg: TrainConfig, config: dict[str, Any], device: str, device_bytes: int,
                             prompt_tokens: int = 256) -> int | None:
    """The largest ``optim.micro_batch_tokens`` (a row's tokens times a whole number of rows) whose plan fits."""
    width = prompt_tokens + cfg.rollout.max_completion_length
    for rows in range(cfg.batch_size, 0, -1):
        trial = cfg.model_copy(update={"optim": cfg.optim.model_copy(update={"micro_batch_size": None,
                                                                             "micro_batch_tokens": rows * width})})
        if plan(trial, config, device, device_bytes, prompt_tokens).fits():
            return rows * width
    return None


def check_fits(cfg: TrainConfig, prompt_tokens: int = 256) -> None:
    """ValueError, in one line naming the fix, when the plan says ``cfg`` cannot fit this process's GPU."""
    import torch

    from cohort.trainer.distributed import local_device

    device = local_device(cfg.model.device)
    if device.type != "cuda":
        return
    total = torch.cuda.get_device_properties(device).total_memory
    config = model_config(cfg)
    p = plan(cfg, config, "cuda", total, prompt_tokens)
    if p.fits():
        return
    budget = largest_budget_that_fits(cfg, config, "cuda", total, prompt_tokens)
    fix = (f"optim.micro_batch_tokens={budget} (and optim.micro_batch_size unset)" if budget else
           "model.lora.rank=16, optim.gradient_checkpointing=true or a smaller model")
    raise ValueError(f"the memory plan needs {p.peak / GIB:.1f} GiB on {device} ({total / GIB:.1f} GiB): "
                     f"set {fix}; cohort plan shows the parts")
