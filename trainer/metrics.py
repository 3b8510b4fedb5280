"""One metrics vocabulary, written to JSONL and TensorBoard, a rich progress bar, a reward-curve PNG.

Names are namespaced: ``reward/*`` (mean and each verifier component), ``verify/unusable_frac``,
``verify/idle_frac`` (share of the step the learner waited on verifiers), ``verify/latency_s``,
``group/zero_std_frac``, ``policy/*`` (clip_frac, kl, entropy, grad_norm, lr), ``loss/*``,
``rollout/len_mean``, ``rollout/truncated_frac``, ``throughput/*`` and ``time/*``. The ``time/``
and ``throughput/`` keys are wall-clock measurements; every other key is a deterministic function
of the seed (the exact-resume test compares them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TIMING_PREFIXES = ("time/", "throughput/", "verify/idle", "verify/latency")


def deterministic(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if not k.startswith(TIMING_PREFIXES)}


class MetricsLog:
    def __init__(self, output_dir: str | Path, *, tensorboard: bool, progress: bool, total_steps: int, start_step: int):
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
        if progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.fields[info]}"))
            self._progress.start()
            self._task = self._progress.add_task("train", total=total_steps, completed=start_step, info="")

    def _truncate(self, start_step: int) -> None:
        """On resume, drop records past the checkpoint (they will be produced again)."""
        if not self.path.exists():
            return
        keep = [line for line in self.path.read_text().splitlines() if line and json.loads(line)["step"] <= start_step]
        self.path.write_text("".join(line + "\n" for line in keep))

    def log(self, step: int, record: dict[str, float]) -> None:
        self._file.write(json.dumps({"step": step, **record}) + "\n")
        self._file.flush()
        if self._tb is not None:
            for k, v in record.items():
                self._tb.add_scalar(k, v, step)
        if self._progress is not None:
            info = (f"reward {record.get('reward/mean', float('nan')):.3f}  "
                    f"unusable {record.get('verify/unusable_frac', 0):.2f}  "
                    f"{record.get('time/step_s', 0):.2f}s/step")
            self._progress.update(self._task, completed=step, info=info)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        if self._tb is not None:
            self._tb.close()
        self._file.close()


def read(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]


def plot_rewards(metrics_path: str | Path, png_path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read(metrics_path)
    steps = [r["step"] for r in records]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, [r.get("reward/mean", float("nan")) for r in records], label="reward/mean", lw=2)
    for key in sorted({k for r in records for k in r if k.startswith("reward/") and k.count("/") == 1}):
        if key not in ("reward/mean", "reward/std"):
            ax.plot(steps, [r.get(key, float("nan")) for r in records], label=key, lw=1, alpha=0.7)
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
