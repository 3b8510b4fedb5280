"""``cohort eval`` on the tiny embedded model: a checkpoint from a short run, real verifier servers,
pass@k numbers checked by hand."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cohort.rpc.launch import ServiceProcess
from cohort.trainer.evaluate import Slice, pass_at_k


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # C(3,2)/C(4,2) prompts without a pass
    assert pass_at_k(4, 3, 2) == 1.0
    s = Slice()
    s.add([1.0, 0.0, 0.5, 0.0], [True, False, False, False], ["ok", "ok", "ok", "verifier_error"])
    s.add([0.0, 0.0, 0.0, 0.0], [False] * 4, ["ok"] * 4)
    out = s.summary(2)
    # prompt 1: n=3 usable, c=1 -> pass@1 1/3, pass@2 1 - C(2,2)/C(3,2) = 2/3; prompt 2: 0
    assert out["pass@1"] == pytest.approx((1 / 3) / 2) and out["pass@2"] == pytest.approx((2 / 3) / 2)
    assert out["usable"] == 7 and out["reward_mean"] == pytest.approx(1.5 / 7)
    assert out["statuses"] == {"ok": 7, "verifier_error": 1}


@pytest.fixture(scope="module")
def servers():
    with ServiceProcess(["math", "arith"]) as proc:
        yield proc


def test_eval_a_checkpoint_table_and_json(tmp_path, servers):
    from cohort.cli import _load_commands, app
    from cohort.trainer.config import load_config
    from cohort.trainer.train import train

    ep = servers.endpoint
    verifiers = (f'scoring.verifiers=[{{name: math, weight: 0.8, endpoints: ["{ep}"]}}, '
                 f'{{name: arith, weight: 0.2, endpoints: ["{ep}"], options: {{correct_weight: "0", '
                 f'format_weight: "1", require_eos: "1"}}}}]')
    small = ["model.tiny={hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 2}",
             "grpo.prompts_per_step=4", "grpo.num_generations=4", "run.torch_threads=1", "run.progress=false",
             "run.plot=false", "run.tensorboard=false", "rollout.generation_chunks=1"]
    cfg = load_config(None, [*small, verifiers, "run.max_steps=2", f"run.output_dir={tmp_path / 'run'}"])
    train(cfg, {"math": [ep], "arith": [ep]})
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"q{a}", "prompt": f"{a}+1=", "answer": a + 1, "source": "s" + str(a % 2)})
                            + "\n" for a in range(5)))
    _load_commands()
    args = ["eval", "--model", str(tmp_path / "run" / "final"), "--data", str(rows), "-n", "4", "-k", "2",
            "--batch-prompts", "2", verifiers, "run.torch_threads=1"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in result.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 5 * 4 and {x["id"] for x in lines} == {f"q{a}" for a in range(5)}
    assert all(x["status"] == "ok" and set(x["verifiers"]) == {"math", "arith"} for x in lines)
    assert all(x["passed"] == (x["verifiers"]["math"] == 1.0 and x["verifiers"]["arith"] == 1.0) for x in lines)
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0, table.output
    for needle in ("source=s0", "source=s1", "verifier=math", "verifier=arith", "pass@2", "ok:20"):
        assert needle in table.output, needle
    bad = CliRunner().invoke(app, ["eval", "--data", str(tmp_path / "none.jsonl"), verifiers])
    assert bad.exit_code == 2 and "no such file" in bad.output
