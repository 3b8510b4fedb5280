"""One metrics vocabulary, written to JSONL and TensorBoard, progress on stdout, a reward-curve PNG.

Progress is a rich bar when stdout is a terminal; otherwise (a log file, ``nohup``, CI) a plain line
every ``every_steps`` steps or ``every_s`` seconds, flushed at once, so a redirected run is not silent
until it ends (rich draws nothing live off a terminal).

Names are namespaced: ``reward/*`` (mean and each verifier component), ``verify/unusable_frac``,
``verify/idle_frac`` (share of the step the learner waited on verifiers), ``verify/latency_s``,
``group/zero_std_frac``, ``policy/*`` (clip_frac, kl, entropy, grad_norm, lr), ``loss/*``,
``rollout/len_mean``, ``rollout/truncated_frac``, ``throughput/*`` and ``time/*``. The ``time/``
and ``throughput/`` keys are wall-clock measurements; every other key is a deterministic function
of the seed (the exact-resume test compares them).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TIMING_PREFIXES = ("time/", "throughput/", "verify/idle", "verify/latency", "tools/wait")


def deterministic(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if not k.startswith(TIMING_PREFIXES)}


class StepTimer:
    """Wall time of one step and of its named phases: ``with timer("generate"):`` adds to a phase."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - t

    def record(self, run_start: float, tokens: float) -> dict[str, float]:
        """The step's ``time/``, ``verify/idle`` and ``throughput/`` metrics (``tokens``: completion tokens)."""
        now = time.perf_counter()
        step_s, idle_s = now - self.start, self.seconds["verify_wait"]
        return {"time/step_s": step_s, "time/elapsed_s": now - run_start, "time/generate_s": self.seconds["generate"],
                "time/logprobs_s": self.seconds["logprobs"], "time/update_s": self.seconds["update"], "verify/idle_s": idle_s, "verify/idle_frac": idle_s / step_s,
                "throughput/tokens_per_s": tokens / step_s}


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def pipeline_info(record: dict[str, float]) -> str:
    """The asynchronous pipeline's part of a progress line (empty in lock-step)."""
    if "async/staleness_mean" not in record:
        return ""
    return (f"  stale {record['async/staleness_mean']:.1f}/{record['async/staleness_max']:.0f}"
            f"  dropped {record['async/dropped_stale']:.0f}  buffer {record['async/buffer_ready']:.0f}"
            f"  idle learner {record['async/learner_idle_frac']:.2f} gen {record['async/generator_idle_frac']:.2f}")


class ProgressLines:
    """Plain progress lines for a stdout that is not a terminal: the first step, then every ``every_steps``
    steps or ``every_s`` seconds (whichever comes first), and the last step."""

    def __init__(self, total_steps: int, start_step: int, every_steps: int, every_s: float, out=None) -> None:
        self.total, self.start, self.every_steps, self.every_s = total_steps, start_step, every_steps, every_s
        self.out = out or sys.stdout
        self._t0 = self._last_t = time.monotonic()
        self._last_step = start_step

    def log(self, step: int, record: dict[str, float]) -> None:
        now = time.monotonic()
        due = (step == self.start + 1 or step == self.total or step - self._last_step >= self.every_steps
               or now - self._last_t >= self.every_s)
        if not due:
            return
        elapsed, done = now - self._t0, step - self.start
        eta = elapsed / done * (self.total - step)
        print(f"step {step}/{self.total}  reward {record.get('reward/mean', float('nan')):.3f}  "
              f"unusable {record.get('verify/unusable_frac', 0):.2f}  {record.get('time/step_s', 0):.2f}s/step"
              f"{pipeline_info(record)}  elapsed {_clock(elapsed)}  eta {_clock(eta)}", file=self.out, flush=True)
        self._last_step, self._last_t = step, now


class MetricsLog:
    def __init__(self, output_dir: str | Path, *, tensorboard: bool, progress: bool, total_steps: int, start_step: int,
                 every_steps: int = 10, every_s: float = 30.0):
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        self._truncate(start_step)
        self._file = open(self.path, "a")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.dir / "tensorboard"), purge_step=start_step + 1)
        self._progress = None
        self._lines = None
        if progress and not sys.stdout.isatty():
            self._lines = ProgressLines(total_steps, start_step, every_steps, every_s)
        elif progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.fields[info]}"))
            self._progress.start()
            self._task = self._progress.add_task("train", total=total_steps, completed=start_step, info="")

    def _truncate(self, start_step: int) -> None:
        """On resume, drop records past the checkpoint (they will be produced again)."""
        if not self.path.exists():
            return
        records = read(self.path)  # without a torn last line
        lines = [line for line in self.path.read_text().splitlines() if line][:len(records)]
        keep = [line for line, r in zip(lines, records) if r["step"] <= start_step]
        self.path.write_text("".join(line + "\n" for line in keep))

    def log(self, step: int, record: dict[str, float]) -> None:
        self._file.write(json.dumps(jsonable({"step": step, **record}), allow_nan=False) + "\n")
        self._file.flush()
        if self._tb is not None:
            for k, v in record.items():
                self._tb.add_scalar(k, v, step)
        if self._lines is not None:
            self._lines.log(step, record)
        if self._progress is not None:
            info = (f"reward {record.get('reward/mean', float('nan')):.3f}  "
                    f"unusable {record.get('verify/unusable_frac', 0):.2f}  "
                    f"{record.get('time/step_s', 0):.2f}s/step{pipeline_info(record)}")
            self._progress.update(self._task, completed=step, info=info)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        if self._tb is not None:
            self._tb.close()
        self._file.close()


def read(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``. A last line cut short (the run was killed, or the disk filled, while
    writing it; no newline after it) is left out: its step was not checkpointed and is produced again on resume.
    Any other line that is not JSON is an error naming the file and the line."""
    text = Path(path).read_text()
    lines = text.split("\n")
    records = []
    for i, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if i == len(lines):  # the torn last write
                break
            raise ValueError(f"{path}: line {i} is not JSON ({exc.msg})") from None
    return records


def jsonable(record: dict) -> dict:
    """NaN and infinities as null: ``json.dumps`` would write bare ``NaN``, which is not JSON."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}


def read_if_exists(path: str | Path) -> list[dict[str, Any]]:
    return read(path) if Path(path).exists() else []


def plot_rewards(metrics_path: str | Path, png_path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read(metrics_path)
    steps = [r["step"] for r in records]
    fig, ax = plt.subplots(figsize=(7, 4))
    value = lambda r, key: float("nan") if r.get(key) is None else r[key]  # noqa: E731
    ax.plot(steps, [value(r, "reward/mean") for r in records], label="reward/mean", lw=2)
    for key in sorted({k for r in records for k in r if k.startswith("reward/") and k.count("/") == 1}):
        if key not in ("reward/mean", "reward/std"):
            ax.plot(steps, [value(r, key) for r in records], label=key, lw=1, alpha=0.7)
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
