"""reasoning-gym behind Cohort: its generators as rows, its scorers as the `reasoning_gym` verifier.

Rows come from the real generator (`python -m cohort.verifiers.interop.reasoning_gym`), are read by the one
row parser (`verifiers/records.py`), and are scored by `cohort serve reasoning_gym` over gRPC on loopback
through the learner's client. reasoning-gym itself is the installed, pinned package (extra `interop`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("reasoning_gym")

from cohort.rpc.launch import ServiceProcess  # noqa: E402
from cohort.verifiers.base import GroupRequest, InvalidRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext  # noqa: E402
from cohort.verifiers.client import VerifierClient  # noqa: E402
from cohort.verifiers.interop import reasoning_gym as rgv  # noqa: E402
from cohort.verifiers.records import group_requests, read_tasks, route  # noqa: E402


def write_rows(path, *args, env=None) -> None:
    """The generator, with a fixed string-hash seed (its cross-process check, a second Python process, is skipped:
    the tasks used here do not depend on it; the one that does is tested below)."""
    out = subprocess.run([sys.executable, "-m", "cohort.verifiers.interop.reasoning_gym", str(path), *args],
                         capture_output=True, text=True, timeout=120, env=env or {**os.environ, "PYTHONHASHSEED": "0"})
    assert out.returncode == 0, out.stderr
    assert "wrote " in out.stdout


@pytest.fixture(scope="module")
def server():
    with ServiceProcess(["reasoning_gym"]) as proc:
        yield proc


def score(endpoint, groups):
    async def go():
        async with VerifierClient({"reasoning_gym": [endpoint]}, timeout_s=60) as client:
            await client.handshake()
            return await client.verify_groups(groups)
    return [g.results for g in asyncio.run(go())]


def groups_of(tasks, completions_per_task):
    defaults = {"reasoning_gym": (1.0, {})}
    out = []
    for task, completions in zip(tasks, completions_per_task):
        rollouts = tuple(Rollout(i, c) for i, c in enumerate(completions))
        out += group_requests(task, rollouts, route(task, defaults))
    return out


def tag(text: str) -> str:
    return f"Let me think. <answer>{text}</answer>"


def test_generated_rows_score_through_the_server(tmp_path, server):
    path = tmp_path / "arith.jsonl"
    write_rows(path, "--task", "basic_arithmetic", "-n", "4", "--seed", "3", "--difficulty", "1")
    tasks = read_tasks(path)  # the one row parser: the rows are valid training rows
    assert len(tasks) == 4 and all(t.verifiers[0].name == "reasoning_gym" for t in tasks)
    assert all("<answer>" in t.prompt and t.answer for t in tasks)
    completions = [[tag(t.answer), tag(str(int(t.answer) + 1)), "no tags at all", t.answer] for t in tasks]
    results = score(server.endpoint, groups_of(tasks, completions))
    for group in results:
        gold, wrong, untagged, bare = group
        assert (gold.status, gold.reward, gold.verdict) == (RolloutStatus.OK, 1.0, Verdict.CORRECT)
        assert (wrong.status, wrong.reward) == (RolloutStatus.OK, 0.0)
        assert (untagged.status, untagged.reward, untagged.verdict) == (RolloutStatus.OK, 0.0, Verdict.NO_ANSWER)
        assert (bare.status, bare.reward) == (RolloutStatus.OK, 0.0)  # extract=answer_tag: tags required


def test_extract_none_scores_the_whole_completion(tmp_path, server):
    path = tmp_path / "arith.jsonl"
    write_rows(path, "--task", "basic_arithmetic", "-n", "1", "--seed", "5")
    (task,) = read_tasks(path)
    (group,) = groups_of([task], [[f" {task.answer}\n", tag(task.answer)]])
    group.options = {**group.options, "extract": "none"}
    (whole, tagged) = score(server.endpoint, [group])[0]
    assert whole.reward == 1.0
    # their default scorer gives containment partial credit (len(gold) / len(answer)): PARTIAL, passed through
    assert 0.0 < tagged.reward < 1.0 and tagged.verdict is Verdict.PARTIAL


def test_extract_last_number_scores_the_last_number_of_a_sentence(tmp_path, server):
    """`extract: last_number` (GSM8K's rule): a chat model's sentence is graded on its last number; echoing the
    question's operands, a number before the answer, or no number at all is not a pass."""
    path = tmp_path / "chain.jsonl"
    write_rows(path, "--task", "chain_sum", "-n", "2", "--seed", "7", "--difficulty", "0")
    tasks = read_tasks(path)
    completions = [[f"The answer is {t.answer}.", f"{t.answer} is wrong, it is {int(t.answer) + 1}", "I cannot say.",
                    f"Thousands: {int(t.answer) + 1000:,}"] for t in tasks]
    groups = groups_of(tasks, completions)
    for g in groups:
        g.options = {**g.options, "extract": "last_number"}
    for said, later, none, commas in score(server.endpoint, groups):
        assert (said.status, said.reward, said.verdict) == (RolloutStatus.OK, 1.0, Verdict.CORRECT)
        # not a pass (their scorer may give a near miss partial credit: chain_sum gives 0.25)
        assert later.status is RolloutStatus.OK and later.reward < 1.0
        assert (none.status, none.reward, none.verdict) == (RolloutStatus.OK, 0.0, Verdict.NO_ANSWER)
        assert commas.status is RolloutStatus.OK and commas.reward < 1.0  # 1,0xx read as one number, not as 0xx


def test_a_policys_garbage_is_scored_zero_never_masked(tmp_path, server):
    """prime_factorization's scorer raises ValueError on a non-number: the policy's doing, reward 0, flagged."""
    path = tmp_path / "primes.jsonl"
    write_rows(path, "--task", "prime_factorization", "-n", "1", "--seed", "1")
    (task,) = read_tasks(path)
    huge = "1" * (rgv.MAX_ANSWER_CHARS + 1)
    (group,) = groups_of([task], [[tag("zzz garbage"), tag(task.answer), tag(huge), tag("")]])
    (results,) = score(server.endpoint, [group])
    raised, gold, over, empty = results
    assert (raised.status, raised.reward, raised.flags) == (RolloutStatus.OK, 0.0, (rgv.SCORER_RAISED,))
    assert "their scorer raised" in raised.detail
    assert (gold.status, gold.reward) == (RolloutStatus.OK, 1.0)
    assert (over.status, over.reward, over.flags) == (RolloutStatus.OK, 0.0, ("candidate_limit",))
    assert empty.status is RolloutStatus.OK and empty.reward < 0.1  # their own value for "" (0.01 here), passed through


def test_an_item_that_is_not_the_rows_is_masked_as_invalid_reference(tmp_path, server):
    path = tmp_path / "arith.jsonl"
    write_rows(path, "--task", "basic_arithmetic", "-n", "1", "--seed", "2")
    (task,) = read_tasks(path)
    (use,) = task.verifiers
    o = dict(use.options)
    cases = {
        "digest": {**o, "digest": "0" * 16},
        "does not name a reasoning-gym item": {k: v for k, v in o.items() if k != "index"},
        "no task": {**o, "task": "no_such_task"},
        "refuses config": {**o, "config": json.dumps({**json.loads(o["config"]), "min_terms": 9, "max_terms": 2})},
        "not JSON": {**o, "config": "{nope"},
        "not a non-negative integer": {**o, "index": "-1"},
    }
    groups = []
    for opts in cases.values():
        (g,) = groups_of([task], [[tag(task.answer)]])
        g.options = opts
        groups.append(g)
    (g,) = groups_of([dataclasses.replace(task, reference=Reference(answer="12345"))], [[tag("12345")]])
    groups.append(g)  # an edited answer
    results = score(server.endpoint, groups)
    for why, (r,) in zip([*cases, "is not the item's"], results):
        assert r.status is RolloutStatus.INVALID_REFERENCE, (why, r)
        assert why in r.detail, (why, r.detail)


def test_held_out_rows_share_no_question_with_training_rows(tmp_path):
    held_out, train = tmp_path / "test.jsonl", tmp_path / "train.jsonl"
    write_rows(held_out, "--task", "basic_arithmetic", "-n", "20", "--seed", "0", "--difficulty", "0")
    write_rows(train, "--task", "basic_arithmetic", "-n", "40", "--seed", "0", "--difficulty", "0",
               "--exclude", str(held_out))
    q_test = {t.prompt for t in read_tasks(held_out)}
    q_train = {t.prompt for t in read_tasks(train)}
    assert len(q_train) > 5 and not q_test & q_train


def test_excluding_questions_that_recur_still_gives_the_rows_asked_for(tmp_path):
    """chain_sum level 0 has about 200 questions, so the held-out ones recur among the training items."""
    held_out, train = tmp_path / "test.jsonl", tmp_path / "train.jsonl"
    write_rows(held_out, "--task", "chain_sum", "-n", "64", "--seed", "2000", "--difficulty", "0")
    write_rows(train, "--task", "chain_sum", "-n", "320", "--seed", "0", "--difficulty", "0", "--exclude", str(held_out))
    q_test, train_tasks = {t.prompt for t in read_tasks(held_out)}, read_tasks(train)
    assert len(train_tasks) == 320 and not q_test & {t.prompt for t in train_tasks}


def test_bad_generator_input_is_one_line_and_exit_2(tmp_path):
    for args, needle in [(["--task", "no_such_task", "-n", "2"], "has no task 'no_such_task'"),
                         (["--task", "basic_arithmetic", "-n", "2", "--config", "[1]"], "JSON object"),
                         (["--task", "basic_arithmetic", "-n", "2", "--config", '{"min_terms": 9, "max_terms": 2}'],
                          "refuses config")]:
        out = subprocess.run([sys.executable, "-m", "cohort.verifiers.interop.reasoning_gym", str(tmp_path / "x.jsonl"),
                              *args], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_their_scorer_raising_on_its_own_gold_masks_in_process(monkeypatch):
    """A task registered through reasoning-gym's own extension API whose scorer cannot score its gold (scored in
    this process, workers=0: worker processes cannot see a task registered here)."""
    import reasoning_gym.factory as factory
    from reasoning_gym.dataset import ProceduralDataset

    @dataclasses.dataclass
    class Cfg:
        seed: int = 0
        size: int = 4

    class Broken(ProceduralDataset):
        def __init__(self, config):
            super().__init__(config, config.seed, config.size)

        def __getitem__(self, idx):
            return {"question": f"q{idx}", "answer": "bad gold", "metadata": {"source_dataset": "cohort_broken"}}

        def score_answer(self, answer, entry):
            int(entry["answer"])  # the gold is malformed
            return 1.0

    if "cohort_broken" not in factory.DATASETS:
        factory.register_dataset("cohort_broken", Broken, Cfg)
    (row,) = rgv.rows("cohort_broken", 1)
    opts = row["verifiers"][0]["options"]
    g = GroupRequest("reasoning_gym", (Rollout(0, tag("1")),), Reference(answer="bad gold"), options=opts)
    (r,) = rgv.ReasoningGymVerifier(workers=0).verify_group(g, VerifyContext())
    assert r.status is RolloutStatus.INVALID_REFERENCE and "own answer" in r.detail
    with pytest.raises(InvalidRequest, match="extract"):
        rgv.ReasoningGymVerifier(workers=0).verify_group(dataclasses.replace(g, options={**opts, "extract": "xml"}),
                                                VerifyContext())


def test_a_long_gold_answer_is_scored_not_cut_by_the_candidate_limit(monkeypatch):
    """number_sorting's gold lists pass 4,096 characters at level 1: the limit is twice the gold's length there."""
    longest = max(rgv.rows("number_sorting", 3, seed=0, difficulty=1), key=lambda r: len(r["answer"]))
    assert len(longest["answer"]) > rgv.MAX_ANSWER_CHARS
    opts = longest["verifiers"][0]["options"]
    rollouts = (Rollout(0, tag(longest["answer"])), Rollout(1, tag("9" * (2 * len(longest["answer"]) + 1))))
    g = GroupRequest("reasoning_gym", rollouts, Reference(answer=longest["answer"]), options=opts)
    gold, over = rgv.ReasoningGymVerifier(workers=0).verify_group(g, VerifyContext())
    assert (gold.status, gold.reward) == (RolloutStatus.OK, 1.0)
    assert (over.status, over.reward, over.flags) == (RolloutStatus.OK, 0.0, ("candidate_limit",))


def test_the_reasoning_gym_verifier_passes_the_conformance_kit():
    """Every rule of the kit (known answers, determinism, order, status codes, deadlines, SIGTERM drain)."""
    from pathlib import Path

    from cohort.conformance import RULES, load_cases, run_kit

    cases = load_cases(Path(__file__).resolve().parent / "cases" / "reasoning_gym.jsonl", "reasoning_gym")
    results = run_kit("127.0.0.1:0", "reasoning_gym", cases,
                      server_cmd=f"{sys.executable} -m cohort.cli serve reasoning_gym --port {{port}}")
    assert {r.rule: r.status for r in results} == {rule: "pass" for rule in RULES}, [r for r in results if r.status != "pass"]


def test_an_answer_that_hangs_their_scorer_is_scored_zero_within_the_budget(tmp_path, slowdown):
    """polynomial_multiplication's scorer spends minutes on `x**(9**9**9)` (one big-integer power, GIL held): the
    worker is killed at the budget, the answer scored 0 and flagged; the server answers the next group at once."""
    path = tmp_path / "poly.jsonl"
    # its items differ between processes unless the string-hash seed is fixed: the generator refuses, then is given one
    refused = subprocess.run([sys.executable, "-m", "cohort.verifiers.interop.reasoning_gym", str(path), "--task",
                              "polynomial_multiplication", "-n", "1"], capture_output=True, text=True, timeout=120,
                             env={k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"})
    assert refused.returncode == 2 and "PYTHONHASHSEED" in refused.stderr and not path.exists()
    write_rows(path, "--task", "polynomial_multiplication", "-n", "1", "--seed", "0",
               env={**os.environ, "PYTHONHASHSEED": "0"})
    (task,) = read_tasks(path)
    budget = 1.0 * slowdown()
    env = {"COHORT_RG_BUDGET_S": f"{budget:.2f}", "COHORT_RG_WORKERS": "1", "PYTHONHASHSEED": "0"}
    with ServiceProcess(["reasoning_gym"], env=env) as proc:
        t0 = time.monotonic()
        (hang,) = groups_of([task], [[tag("x**(9**9**9)"), tag(task.answer)]])
        (hung, right) = score(proc.endpoint, [hang])[0]
        took = time.monotonic() - t0
        (again,) = score(proc.endpoint, groups_of([task], [[tag(task.answer)]]))[0]
    assert (hung.status, hung.reward, hung.flags) == (RolloutStatus.OK, 0.0, ("candidate_limit",)), hung
    assert "budget" in hung.detail and took < 10 * budget + 10
    assert (right.status, right.reward) == (RolloutStatus.OK, 1.0)
    assert (again.status, again.reward) == (RolloutStatus.OK, 1.0)
