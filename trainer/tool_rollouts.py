"""Multi-turn rollouts with tools: generate until a tool call, run the calls, write the results back, go on.

:class:`ToolRollouts` wraps any rollout engine (transformers, vLLM; in the asynchronous pipeline's workers
too) when ``rollout.max_turns > 1``. One :meth:`~ToolRollouts.generate` is a loop over turns:

1. The engine generates every live row's next turn (the first turn G per prompt, as without tools; later
   turns one row per transcript, each ``prompt + transcript so far``).
2. Each turn is cut just after its first complete tool call (``cohort.tools.calls``: ``<tool_call>`` JSON
   or a fenced ``python`` block); the tokens after it were never read by a tool and are dropped. A turn
   with no call, or the last allowed turn, ends the row as it was generated.
3. The calls of all rows in flight go out as one batch (``cohort.tools.client``: one ``ExecuteTools``
   per server). Each result is written back into the transcript as tokens marked in
   ``ToolTrace.tool_mask``, the program's output encoded as plain text
   (:func:`cohort.verifiers.base.encode_text`: a printed ``<|im_end|>`` is those characters, never the
   token, so a program cannot end the turn or forge one): context for the next turn, never part of the loss or the KL
   (``RolloutBatch.loss_mask``). Generated tokens keep the sampler's log-probs across turns.
4. A call that hit an infrastructure failure (the sandbox down, a server unreachable past
   ``rollout.tool_timeout_s``) stops its row; :meth:`trainer.scoring.Scorer.submit` masks that rollout.
   A call that failed by its own content (code that raises) is a result the model reads.

``rollout.max_completion_length`` bounds the whole transcript (tool results included); a row over it is
truncated. The text the verifiers score is what the model wrote: its turns joined, without the tool
results (a tool's printout is never taken as the model's answer).

Cost: each later turn prefills its whole transcript again (no KV cache is kept across tool calls), and a
turn generates past its call until the engine stops (the cut is made afterwards, engine-agnostic).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from cohort.tools.base import CallResult
from cohort.tools.calls import Found, choose_format, find_call, render_parts
from cohort.tools.client import ToolClient
from cohort.trainer.config import RolloutSection, TrainConfig
from cohort.trainer.distributed import SINGLE, Comm
from cohort.trainer.rollout import RolloutBatch, ToolTrace
from cohort.verifiers.base import encode_text


@dataclass
class _Row:
    prompt: list[int]
    session: str  # the grpo.tool.v1 session_id of all the row's calls
    tokens: list[int] = field(default_factory=list)  # the transcript: generated turns and tool results
    by_tool: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: list[str] = field(default_factory=list)  # the generated turns' text
    turns: int = 0
    calls: int = 0
    ended: bool = False  # the model stopped by itself (EOS)
    failed: bool = False
    turn_limited: bool = False
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def add(self, ids: list[int], logprobs: list[float], by_tool: bool) -> None:
        self.tokens += ids
        self.logprobs += logprobs
        self.by_tool += [by_tool] * len(ids)


class ToolRollouts:
    """A rollout engine whose rollouts may call tools (module docstring)."""

    def __init__(self, engine: Any, client: ToolClient, tokenizer: Any, cfg: RolloutSection) -> None:
        self.engine, self.client, self.tokenizer, self.cfg = engine, client, tokenizer, cfg
        self.format = choose_format(cfg.tool_format, getattr(tokenizer, "chat_template", None))
        self.pad_id = int(tokenizer.pad_token_id)
        # session ids unique across processes (workers, restarts): a stateful tool keeps state per session
        self._sessions = (f"{uuid.uuid4().hex[:12]}-{n}" for n in itertools.count())

    # the engine's own surface, passed through
    @property
    def report_logprobs(self) -> bool:
        return self.engine.report_logprobs

    @report_logprobs.setter
    def report_logprobs(self, value: bool) -> None:
        self.engine.report_logprobs = value

    def sync_weights(self, policy: torch.nn.Module) -> None:
        self.engine.sync_weights(policy)

    def state_dict(self) -> dict[str, Any]:
        return self.engine.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.engine.load_state_dict(state)

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            self.engine.close()

    def generate(self, prompts: list[list[int]], num_generations: int,
                 max_new_tokens: int | None = None) -> RolloutBatch:
        budget = max_new_tokens or self.cfg.max_completion_length
        g = num_generations
        rows = [_Row(list(prompts[i // g]), next(self._sessions)) for i in range(len(prompts) * g)]
        first = out = self.engine.generate(prompts, g, budget)
        live = list(range(len(rows)))
        try:
            while live:
                pending = self._read_turn(rows, live, out, budget)
                if not pending:
                    break
                self._run_calls(rows, pending, budget)
                live = [i for i, _ in pending if not rows[i].failed and len(rows[i].tokens) < budget]
                if live:
                    left = max(budget - len(rows[i].tokens) for i in live)
                    out = self.engine.generate([rows[i].prompt + rows[i].tokens for i in live], 1, left)
        finally:  # the rollouts ended: a stateful tool frees their sessions now
            self.client.end_sessions([r.session for r in rows if r.calls])
        return self._batch(rows, first)

    def _read_turn(self, rows: list[_Row], live: list[int], out: RolloutBatch, budget: int) -> list[tuple[int, Found]]:
        """Append each live row's new turn (cut after its first call); the rows that called a tool."""
        pending = []
        for j, i in enumerate(live):
            r = rows[i]
            r.turns += 1
            n = min(int(out.completion_mask[j].sum()), budget - len(r.tokens))
            ids = out.completion_ids[j, :n].tolist()
            lps = out.rollout_logprobs[j, :n].tolist() if out.rollout_logprobs is not None else [0.0] * n
            found = self._first_call(ids)
            if found is not None and r.turns < self.cfg.max_turns:
                k, call = found
                r.add(ids[:k], lps[:k], False)
                r.text.append(self.tokenizer.decode(ids[:k], skip_special_tokens=True))
                pending.append((i, call))
                continue
            r.add(ids, lps, False)
            r.text.append(self.tokenizer.decode(ids, skip_special_tokens=True))
            r.ended = n == int(out.completion_mask[j].sum()) and not bool(out.truncated[j])
            r.turn_limited = found is not None
        return pending

    def _first_call(self, ids: list[int]) -> tuple[int, Found] | None:
        """(tokens up to and including the first complete call, the call), or None: the shortest prefix
        whose text holds a complete call (binary search: a longer prefix holds it too)."""
        decode = lambda k: self.tokenizer.decode(ids[:k], skip_special_tokens=True)  # noqa: E731
        if find_call(decode(len(ids)), self.format) is None:
            return None
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if find_call(decode(mid), self.format) is None:
                lo = mid + 1
            else:
                hi = mid
        return lo, find_call(decode(lo), self.format)

    def _run_calls(self, rows: list[_Row], pending: list[tuple[int, Found]], budget: int) -> None:
        """One batch of calls for every row that made one; their results into the transcripts."""
        batch = [dataclasses.replace(f.call, session_id=rows[i].session) for i, f in pending if f.call]
        start = time.perf_counter()
        results = iter(self.client.execute(batch) if batch else [])
        share = (time.perf_counter() - start) / len(pending)
        for i, found in pending:
            r = rows[i]
            r.calls += 1
            r.seconds += share
            result = next(results) if found.call is not None else CallResult(True, found.error, "bad_arguments")
            if not result.ok:
                r.failed = True
                continue
            if result.error_kind:
                r.errors.append(result.error_kind)
            head, body, tail = render_parts(result, self.format)  # the body is a program's: text, never control tokens
            ids = self._markup(head) + encode_text(self.tokenizer, body) + self._markup(tail)
            ids = ids[: min(self.cfg.tool_result_tokens, budget - len(r.tokens))]
            r.add(ids, [0.0] * len(ids), True)

    def _markup(self, text: str) -> list[int]:
        """The format's own markup around a result (``<tool_response>`` may be a template token)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _batch(self, rows: list[_Row], first: RolloutBatch) -> RolloutBatch:
        b, t = len(rows), max(1, max(len(r.tokens) for r in rows))
        ids = torch.full((b, t), self.pad_id, dtype=torch.long)
        mask = torch.zeros((b, t), dtype=torch.long)
        tool_mask = torch.zeros((b, t), dtype=torch.bool)
        logprobs = torch.zeros((b, t))
        for i, r in enumerate(rows):
            n = len(r.tokens)
            ids[i, :n] = torch.tensor(r.tokens, dtype=torch.long)
            mask[i, :n] = 1
            tool_mask[i, :n] = torch.tensor(r.by_tool)
            logprobs[i, :n] = torch.tensor(r.logprobs)
        trace = ToolTrace(tool_mask, torch.tensor([r.failed for r in rows]), torch.tensor([r.calls for r in rows]),
                          torch.tensor([r.turns for r in rows]), torch.tensor([r.turn_limited for r in rows]),
                          torch.tensor([r.seconds for r in rows]), [tuple(r.errors) for r in rows])
        return RolloutBatch(first.prompt_ids, first.prompt_mask, ids, mask, torch.tensor([not r.ended for r in rows]),
                            ["".join(r.text) for r in rows],
                            logprobs if first.rollout_logprobs is not None else None, trace)


def metrics(batch: RolloutBatch, comm: Comm = SINGLE) -> dict[str, float]:
    """Tool calls and turns per rollout, errors by kind (per call), infrastructure failures, wait: over every
    rank's rollouts (``comm``: their counts summed in one collective)."""
    tr = batch.tools
    if tr is None:  # no tools (rollout.max_turns == 1): the same on every rank
        return {}
    kinds = Counter(k for row in tr.errors for k in row)
    n = comm.sum_floats({"rollouts": len(batch), "calls": int(tr.calls.sum()), "turns": int(tr.turns.sum()),
                         "failed": int(tr.failed.sum()), "turn_limited": int(tr.turn_limited.sum()),
                         "wait_s": float(tr.seconds.sum()), "result_tokens": int(tr.tool_mask.sum()),
                         **{f"errors/{k}": v for k, v in kinds.items()}})
    rollouts, calls = n["rollouts"], n["calls"]
    errors = {k.removeprefix("errors/"): v for k, v in n.items() if k.startswith("errors/")}
    out = {"tools/calls_per_rollout": calls / rollouts, "tools/turns_mean": n["turns"] / rollouts,
           "tools/error_frac": sum(errors.values()) / calls if calls else 0.0,
           "tools/failed_frac": n["failed"] / rollouts, "tools/turn_limited_frac": n["turn_limited"] / rollouts,
           "tools/wait_s": n["wait_s"], "tools/result_tokens_mean": n["result_tokens"] / rollouts}
    return out | {f"tools/errors/{k}": v / calls for k, v in sorted(errors.items())}


def wrap(engine: Any, cfg: RolloutSection, tokenizer: Any) -> Any:
    """``engine`` itself (``rollout.max_turns == 1``), or wrapped for tools: then every configured server is
    asked what it offers (a missing one fails here)."""
    if cfg.max_turns == 1:
        return engine
    missing = [s.serve for s in cfg.tools if not s.endpoints]
    if missing:
        raise ValueError(f"tool servers without endpoints ({', '.join(map(str, missing))}): `cohort train` and "
                         "`cohort eval` start them; elsewhere give rollout.tools[].endpoints")
    client = ToolClient([s.endpoints for s in cfg.tools], timeout_s=cfg.tool_timeout_s)
    client.handshake()
    return ToolRollouts(engine, client, tokenizer, cfg)


@contextlib.contextmanager
def local_servers(cfg: TrainConfig) -> Iterator[TrainConfig]:
    """``cfg`` with every tool server that has no endpoints started on loopback (``cohort serve``) for the run."""
    local = [s.serve for s in cfg.rollout.tools if not s.endpoints]
    if not local or cfg.rollout.max_turns == 1:
        yield cfg
        return
    from cohort.rpc.launch import LocalServices

    with LocalServices(local) as started:
        tools = [s if s.endpoints else s.model_copy(update={"endpoints": [started[s.serve]]}) for s in cfg.rollout.tools]
        yield cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"tools": tools})})
