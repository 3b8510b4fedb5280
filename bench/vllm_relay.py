"""``rollout.engine=vllm-server`` measured without vLLM, against stand-in servers (tests/vllm/standin.py: real
HTTP and the real ``cohort-gloo`` receiver on 127.0.0.1, no model).

``rss``: a pipelined ``cohort train`` (max_staleness 1, one rollout worker, two stand-in servers,
model.dtype=bfloat16: float32 masters, bf16 pushes); the peak resident memory (VmHWM) of the learner and of the
relay worker, for the embedded tiny model and for SmolLM2-135M::

    python bench/vllm_relay.py rss

``deltas``: the push to one stand-in server, full against delta, after real AdamW steps on float32 masters (an
LM loss on the embedded task's prompts: a real gradient, not GRPO's) pushed in bf16: the share of elements
changed per step, bytes and seconds per push; at the end the server's SHA-256 of what it loaded against the
learner's bf16 copy::

    python bench/vllm_relay.py deltas
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STANDIN = ROOT / "tests" / "vllm" / "standin.py"
MODELS = {"tiny": [], "smollm2": ["model.name=smollm2-135m-instruct"]}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _standins(n: int, vocab: int) -> tuple[list[subprocess.Popen], list[str]]:
    import httpx

    procs, urls = [], []
    for _ in range(n):
        port = _port()
        procs.append(subprocess.Popen([sys.executable, str(STANDIN), "--port", str(port), "--vocab", str(vocab)]))
        urls.append(f"http://127.0.0.1:{port}")
    for url in urls:
        for _ in range(600):
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
    return procs, urls


def _kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def rss(models: list[str], steps: int, extra: list[str] = ()) -> None:
    from cohort.trainer.config import load_config
    from cohort.trainer.models import build_tokenizer

    for name in models:
        tokenizer, _ = build_tokenizer(load_config(None, MODELS[name]).model)
        procs, urls = _standins(2, len(tokenizer))
        out = Path(tempfile.mkdtemp(prefix="relay-rss-"))
        cmd = [str(Path(sys.executable).parent / "cohort"), "train", *MODELS[name], "rollout.engine=vllm-server",
               f"rollout.vllm.servers=[{','.join(urls)}]", "rollout.max_staleness=1", f"run.max_steps={steps}",
               "model.dtype=bfloat16", "rollout.max_completion_length=8", f"run.output_dir={out}",
               "run.target_reward=null", "run.progress=false", "run.plot=false", "run.tensorboard=false",
               "run.save_every=1000", *extra]
        started = time.monotonic()
        learner = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
        peak = {"learner": 0, "relay": 0}
        relay = None
        while learner.poll() is None:
            try:
                peak["learner"] = max(peak["learner"], _kb(learner.pid, "VmHWM"))
                if relay is None:
                    for d in Path("/proc").iterdir():
                        if d.name.isdigit() and (d / "comm").exists():
                            try:
                                if (d / "comm").read_text().strip() == "cohort-rollout1" and \
                                        int((d / "stat").read_text().split()[3]) == learner.pid:
                                    relay = int(d.name)
                            except (OSError, ValueError):
                                pass
                else:
                    peak["relay"] = max(peak["relay"], _kb(relay, "VmHWM"))
            except (OSError, FileNotFoundError):
                pass
            time.sleep(0.2)
        err = learner.stderr.read()
        for p in procs:
            p.kill()
        pushes = [ln for ln in err.splitlines() if "weight pushes" in ln]
        print(f"{name}: exit {learner.returncode} in {time.monotonic() - started:.0f}s; peak RSS learner "
              f"{peak['learner'] / 1024:.0f} MiB, relay worker {peak['relay'] / 1024:.0f} MiB; {' | '.join(pushes)}")
        if learner.returncode:
            print(err[-2000:])


def deltas(models: list[str], steps: int, lrs: dict[str, list[float]]) -> None:
    import torch

    from cohort.trainer import wire
    from cohort.trainer.config import RolloutSection, load_config
    from cohort.trainer.data import load_examples
    from cohort.trainer.engines.vllm_server import VLLMServerEngine
    from cohort.trainer.flat_layout import FlatLayout
    from cohort.trainer.models import build_policy
    from cohort.trainer.precision import resolve

    for name in models:
        for lr in lrs[name]:
            cfg = load_config(None, [*MODELS[name], "model.dtype=bfloat16"])
            policy, tokenizer = build_policy(cfg.model)  # float32 masters
            procs, urls = _standins(1, len(tokenizer))
            texts = [e.prompt if isinstance(e.prompt, str) else str(e.prompt) for e in load_examples(cfg.data)[:64]]
            engine = VLLMServerEngine(RolloutSection(engine="vllm-server", weight_sync_timeout_s=600,
                                                     vllm={"servers": urls, "full_push_every": 1000}),
                                      policy, tokenizer, seed=0, precision=resolve("bfloat16", torch.device("cpu")))
            opt = torch.optim.AdamW(policy.parameters(), lr=lr)
            for step in range(steps):
                batch = tokenizer(texts[step * 4:(step + 1) * 4], return_tensors="pt", padding=True)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = policy(**batch, labels=batch["input_ids"]).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                engine.sync_weights(policy)
            full, rest = engine.pushed[0], engine.pushed[1:]
            layout = FlatLayout.of(policy, torch.bfloat16)
            digest = hashlib.sha256()
            for _, view in layout.views(wire.flat_parameters(policy, dtype=torch.bfloat16)):
                digest.update(view.contiguous().view(torch.uint8).numpy().tobytes())
            import httpx

            held = httpx.get(f"{urls[0]}/weights").json()
            engine.close()
            for p in procs:
                p.kill()
            kinds = "".join("D" if r.kind == "delta" else "F" for r in rest)
            print(f"{name} lr {lr:g} ({layout.numel:,} elements, bf16 {full.nbytes / 1e6:.1f} MB): full push "
                  f"{full.seconds:.3f}s; {len(rest)} steps [{kinds}]: changed "
                  f"{', '.join(f'{r.changed:.2%}' for r in rest)}; delta bytes "
                  f"{', '.join(f'{r.nbytes / 1e6:.2f}' for r in rest)} MB; push s "
                  f"{', '.join(f'{r.seconds:.3f}' for r in rest)}; server == learner bf16: "
                  f"{held['sha256'] == digest.hexdigest()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("rss", "deltas"))
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("overrides", nargs="*", help="rss: more cohort train overrides (rollout.vllm.bucket_mib=1)")
    a = parser.parse_intermixed_args()
    models = a.models.split(",")
    if a.what == "rss":
        rss(models, a.steps, a.overrides)
    else:
        deltas(models, a.steps, {"tiny": [1e-3], "smollm2": [3e-5, 1e-6]})


if __name__ == "__main__":
    main()
