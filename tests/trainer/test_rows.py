"""Task rows (one schema for train, eval and verify): loaders per format, the column mapping, bad rows,
routing of a mixed math + code batch through real servers, and the chat template with end-of-turn stops."""

from __future__ import annotations

import gzip
import json
import string

import pytest
import torch

from cohort.rpc.launch import ServiceProcess
from cohort.trainer.config import CodeFunctionsTask, DataSection, DataSource, TinyModel, load_config
from cohort.trainer.data import code_functions_task, encode_prompts, humaneval_task, load_examples
from cohort.trainer.models import char_tokenizer, stop_token_ids, tiny_llama
from cohort.trainer.rollout import build_engine
from cohort.trainer.scoring import Scorer
from cohort.verifiers.records import RecordError, Task, VerifierUse, read_tasks, route

ROWS = [
    {"id": "m1", "prompt": "2+2=", "answer": 4},
    {"id": "c1", "messages": [{"role": "user", "content": "write add"}],
     "code_tests": {"asserts": ["assert add(1, 2) == 3"]}, "verifiers": ["code"]},
    {"id": "h1", "prompt": "def f(x):", "code_tests": {"test_code": "def check(c):\n    assert c(1) == 2\n",
                                                       "entry_point": "f"},
     "verifiers": [{"name": "code", "weight": 2.0, "options": {"reward": "all_or_nothing"}}]},
]


def check_rows(tasks: list[Task]) -> None:
    assert [t.id for t in tasks] == ["m1", "c1", "h1"]
    assert tasks[0].answer == "4" and tasks[0].reference.kind == "answer" and tasks[0].verifiers is None
    assert tasks[1].messages == (("user", "write add"),) and tasks[1].prompt == "write add"
    assert tasks[1].reference.code_tests.asserts == ("assert add(1, 2) == 3",)
    assert tasks[2].reference.code_tests.kind == "function" and tasks[2].reference.code_tests.entry_point == "f"
    assert tasks[2].verifiers[0].weight == 2.0 and tasks[2].verifiers[0].options == {"reward": "all_or_nothing"}


def test_jsonl_gz_parquet_and_datasets_folders_give_the_same_rows(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = "\n".join(json.dumps(r) for r in ROWS) + "\n"
    (tmp_path / "rows.jsonl").write_text(lines)
    with gzip.open(tmp_path / "rows.jsonl.gz", "wt") as f:
        f.write(lines)
    flat = [{"id": r["id"], "prompt": r.get("prompt") or r["messages"][0]["content"], "answer": str(r.get("answer", "7"))}
            for r in ROWS]
    pq.write_table(pa.Table.from_pylist(flat), tmp_path / "rows.parquet")
    check_rows(read_tasks(tmp_path / "rows.jsonl"))
    check_rows(read_tasks(tmp_path / "rows.jsonl.gz"))
    assert [t.answer for t in read_tasks(tmp_path / "rows.parquet")] == ["4", "7", "7"]
    # save_to_disk folders, with splits
    ds = datasets.DatasetDict({"train": datasets.Dataset.from_list(flat), "test": datasets.Dataset.from_list(flat[:1])})
    ds.save_to_disk(str(tmp_path / "dd"))
    assert [t.id for t in read_tasks(tmp_path / "dd", split="test")] == ["m1"]
    with pytest.raises(RecordError, match="choose one with split"):
        read_tasks(tmp_path / "dd")
    datasets.Dataset.from_list(flat).save_to_disk(str(tmp_path / "one"))
    assert len(read_tasks(tmp_path / "one")) == 3
    # a folder of data files (the Hub layout), filtered by split name
    (tmp_path / "hub" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(flat[:2]), tmp_path / "hub" / "data" / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(flat[2:]), tmp_path / "hub" / "data" / "test-00000-of-00001.parquet")
    assert [t.id for t in read_tasks(tmp_path / "hub", split="train")] == ["m1", "c1"]
    assert [t.id for t in read_tasks(tmp_path / "hub", split="test")] == ["h1"]


def test_column_mapping_gsm8k_and_humaneval_shapes(tmp_path):
    path = tmp_path / "gsm.jsonl"
    path.write_text(json.dumps({"question": "Q?", "answer": "reasoning\n#### 1,234", "extra": 1}) + "\n")
    (t,) = read_tasks(path, columns={"prompt": "question", "answer": "answer"}, answer_delimiter="####",
                      template="{prompt} Put the answer in \\boxed{{}}.", source="gsm8k")
    assert t.prompt == "Q? Put the answer in \\boxed{}." and t.answer == "1234" and t.source == "gsm8k"
    with pytest.raises(RecordError, match=r"gsm.jsonl:1: column 'q' \(mapped to 'prompt'\) is missing"):
        read_tasks(path, columns={"prompt": "q", "answer": "answer"})
    with pytest.raises(RecordError, match="gsm.jsonl:1: .*question.*Extra inputs"):
        read_tasks(path)  # without a mapping, unknown columns are errors
    rows = humaneval_task(DataSource(humaneval=True, limit=3))
    assert [t.id for t in rows] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    ct = rows[0].reference.code_tests
    assert ct.kind == "function" and ct.entry_point == "has_close_elements" and "def check(candidate)" in ct.test_code
    assert ct.setup_code.startswith("from typing import List") and "```python" in rows[0].prompt


@pytest.mark.parametrize("line,message", [
    ('{"prompt": "x"}', "needs a reference: answer or code_tests"),
    ('{"prompt": "x", "answer": "1", "code_tests": {"asserts": ["assert 1"]}}', "either answer or code_tests"),
    ('{"prompt": "x", "code_tests": {"asserts": []}}', "code_tests.asserts is empty"),
    ('{"prompt": "x", "answer": "1", "messages": [{"role": "user", "content": "y"}]}', "either prompt or messages"),
    ('{"messages": [{"role": "robot", "content": "y"}], "answer": "1"}', "role"),
    ('{"prompt": "x", "answer": "1", "verifiers": ["math", "math"]}', "verifiers named twice"),
    ("[1, 2", "not JSON"),
])
def test_a_bad_row_names_its_file_and_line(tmp_path, line, message):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "1+1=", "answer": 2}\n\n' + line + "\n")
    with pytest.raises(RecordError, match=r"d.jsonl:3: .*" + message.replace("(", r"\(")):
        read_tasks(path)
    cfg = DataSection(path=str(path))
    with pytest.raises(ValueError, match=r"d.jsonl:3"):
        load_examples(cfg)


def test_parquet_bad_row_names_its_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": None}]),
                   tmp_path / "x.parquet")
    with pytest.raises(RecordError, match=r"x.parquet:row 1: needs a reference"):
        read_tasks(tmp_path / "x.parquet")


def test_route_uses_row_lists_else_the_verifiers_that_accept_the_reference():
    defaults = {"math": (0.8, {}), "code": (1.0, {"reward": "fraction"}), "format": (0.2, {"mode": "strict"})}
    kinds = {"math": ("answer",), "code": ("code_tests",), "format": ()}
    math_row, code_row, h_row = read_rows_inline()
    assert [r.name for r in route(math_row, defaults, kinds)] == ["math", "format"]
    assert [(r.name, r.weight) for r in route(code_row, defaults, kinds)] == [("code", 1.0)]
    (r,) = route(h_row, defaults, kinds)
    assert (r.weight, dict(r.options)) == (2.0, {"reward": "all_or_nothing"})  # row options over the defaults
    with pytest.raises(RecordError, match="not configured: \\['code'\\]"):
        route(code_row, {"math": (1.0, {})})
    bad = Task("b", "x", math_row.reference, verifiers=code_row.verifiers)
    with pytest.raises(RecordError, match="verifier 'code' accepts \\['code_tests'\\]"):
        route(bad, defaults, kinds)


def read_rows_inline() -> list[Task]:
    from cohort.verifiers.records import parse_task

    return [parse_task(r, f"r{i}") for i, r in enumerate(ROWS)]


def test_sources_mix_generated_code_rows_with_defaults(tmp_path):
    a = code_functions_task(CodeFunctionsTask(num_prompts=20, seed=5))
    assert a == code_functions_task(CodeFunctionsTask(num_prompts=20, seed=5))  # deterministic
    assert a != code_functions_task(CodeFunctionsTask(num_prompts=20, seed=6))
    assert all(len(set(t.reference.code_tests.asserts)) >= 2 for t in a)
    cfg = DataSection(sources=[DataSource(arithmetic={"num_prompts": 3}),
                               DataSource(code_functions={"num_prompts": 2}, verifiers=["code"], name="gen")])
    rows = load_examples(cfg)
    assert [t.source for t in rows] == ["arithmetic"] * 3 + ["gen"] * 2
    assert rows[0].verifiers is None and [u.name for u in rows[3].verifiers] == ["code"]


@pytest.fixture(scope="module")
def math_and_code():
    with ServiceProcess(["math", "code"]) as proc:
        yield proc


HUMANEVAL_0 = '''```python
from typing import List

def has_close_elements(numbers: List[float], threshold: float) -> bool:
    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])
```'''


def test_a_mixed_batch_goes_to_each_rows_verifiers_one_call_per_verifier(tmp_path, math_and_code):
    ep = math_and_code.endpoint
    cfg = load_config(None, [f'scoring.verifiers=[{{name: math, endpoints: ["{ep}"]}}, '
                             f'{{name: code, endpoints: ["{ep}"]}}]'])
    rows = [Task.with_answer("2+2=", "4"), humaneval_task(DataSource(humaneval=True, limit=1))[0],
            Task.with_answer("3+3=", "6")]
    scorer = Scorer(cfg.scoring, {"math": [ep], "code": [ep]})
    try:
        assert scorer.kinds == {"math": ("answer",), "code": ("code_tests",)}
        scorer.check(rows)
        texts = ["4", "5", HUMANEVAL_0, "def has_close_elements(n, t):\n    return False", "\\boxed{6}", "7"]
        calls = scorer.client.stats["calls"]
        scores = scorer.submit(rows, texts, [False] * 6).result()
        assert scorer.client.stats["calls"] - calls == 2  # one BatchVerifyGroups per verifier
        # a code row that names math is a config error at start-up
        with pytest.raises(ValueError, match="verifier 'math' accepts \\['answer'\\]"):
            scorer.check([Task(rows[1].id, "x", rows[1].reference, verifiers=(VerifierUse("math"),))])
    finally:
        scorer.close()
    assert scores.valid.all()  # math does not mask the code row, nor code the math rows
    assert scores.rewards.tolist() == [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]
    math, code = scores.components["math"], scores.components["code"]
    assert not math[[0, 2]].isnan().any() and math[1].isnan().all()
    assert code[1].tolist() == [1.0, 0.0] and code[[0, 2]].isnan().all()


def test_a_row_naming_an_unconfigured_verifier_fails_at_start_up(tmp_path):
    from cohort.trainer.train import train

    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    cfg = load_config(None, [f"data.path={path}", "data.arithmetic=null", f"run.output_dir={tmp_path}",
                             'scoring.verifiers=[{name: math, endpoints: ["127.0.0.1:1"]}]'])
    with pytest.raises(RecordError, match="row 'c1' asks for verifiers that are not configured: \\['code'\\]"):
        train(cfg, {"math": ["127.0.0.1:1"]})  # before any model, server or rollout


def chat_tokenizer():
    tok = char_tokenizer(string.ascii_letters + string.digits + " +=?:\n")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_end|>"]})
    tok.chat_template = ("{% for m in messages %}{{ m.role }}: {{ m.content }}<|im_end|>\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant: {% endif %}")
    return tok


def test_chat_template_system_prompt_and_end_of_turn_stop():
    tok = chat_tokenizer()
    rows = [Task.with_answer("2+2=", "4"), Task("m", "hi", Task.with_answer("x", "1").reference,
                                                messages=(("system", "S"), ("user", "hi")))]
    cfg = DataSection(path="unused", system_prompt="Be brief")
    texts = [tok.decode(ids) for ids in encode_prompts(rows, tok, cfg)]
    assert texts[0] == "system: Be brief<|im_end|>\nuser: 2+2=<|im_end|>\nassistant: "
    assert texts[1] == "system: S<|im_end|>\nuser: hi<|im_end|>\nassistant: "  # the row's own system prompt wins
    assert tok.decode(encode_prompts(rows[:1], tok, DataSection(path="u", chat_template="off"))[0]) == "2+2="
    with pytest.raises(ValueError, match="chat messages but"):
        encode_prompts(rows[1:], char_tokenizer(), DataSection(path="u"))

    model = tiny_llama(TinyModel(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2), tok)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert stop_token_ids(tok, model) == sorted({tok.eos_token_id, im_end})
    cfg = load_config(None, ["rollout.max_completion_length=24"])
    engine = build_engine(cfg.rollout, model, tok, seed=0)
    batch = engine.generate(encode_prompts(rows, tok, DataSection(path="u")), 16)
    stopped = 0
    for ids, mask, trunc, text in zip(batch.completion_ids, batch.completion_mask, batch.truncated, batch.texts):
        n = int(mask.sum())
        hits = (ids[:n] == im_end).nonzero().flatten().tolist() + (ids[:n] == tok.eos_token_id).nonzero().flatten().tolist()
        if not trunc:  # the completion ends at its first stop token, which is in the loss mask
            assert sorted(hits)[0] == n - 1
            stopped += int(ids[n - 1] == im_end)
        else:
            assert hits == [] and n == 24
        assert "<|im_end|>" not in text and "<eos>" not in text  # decoded without special tokens
    assert stopped > 0


def test_example_smollm2_mixed_config_is_valid_and_its_rows_load():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    cfg = load_config(root / "examples" / "smollm2-mixed.yaml")
    assert cfg.model.name == "smollm2-135m-instruct"
    sources = [DataSource(**{**s.model_dump(exclude_unset=True), "path": str(root / s.path)}) if s.path else s
               for s in cfg.data.sources]
    rows = load_examples(DataSection(sources=sources))
    gsm = [t for t in rows if t.source == "gsm8k"]
    code = [t for t in rows if t.source == "code_functions"]
    assert len(gsm) == 64 and gsm[0].answer == "72" and [u.name for u in gsm[0].verifiers] == ["math", "format"]
    assert len(code) == 256 and [u.name for u in code[0].verifiers] == ["code"]
    defaults = {v.name: (v.weight, v.options) for v in cfg.scoring.verifiers}
    kinds = {"math": ("answer",), "code": ("code_tests",), "format": ()}
    assert {tuple(r.name for r in route(t, defaults, kinds)) for t in rows} == {("math", "format"), ("code",)}


def test_cohort_verify_reads_the_same_rows_and_routes_them(tmp_path, math_and_code):
    import subprocess
    import sys

    ep = math_and_code.endpoint
    path = tmp_path / "mixed.jsonl"
    rows = [{"group_id": "m", "prompt": "2+2", "answer": "4", "rollouts": ["\\boxed{4}", "5"]},
            {"group_id": "c", "messages": [{"role": "user", "content": "write f"}],
             "code_tests": {"asserts": ["assert f() == 1"]}, "rollouts": ["def f():\n    return 1", "def f(): return 2"],
             "verifiers": [{"name": "code", "weight": 2.0}]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    r = subprocess.run([sys.executable, "-m", "cohort.cli", "verify", str(path), "-e", f"math={ep}", "-e", f"code={ep}",
                        "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(x["group_id"], x["reward"], sorted(x["verifiers"])) for x in out] == [
        ("m", 1.0, ["math"]), ("m", 0.0, ["math"]), ("c", 2.0, ["code"]), ("c", 0.0, ["code"])]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_source_weights_set_the_share_of_drawn_prompts_and_keep_every_row(tmp_path):
    from collections import Counter

    from cohort.trainer.data import PromptSampler

    math_rows = _jsonl(tmp_path / "m.jsonl", [{"id": f"m{i}", "prompt": f"{i}+1=", "answer": i + 1} for i in range(9)])
    code = {"asserts": ["assert f() == 1"]}
    code_rows = _jsonl(tmp_path / "c.jsonl", [{"id": f"c{i}", "prompt": f"write f {i}", "code_tests": code}
                                              for i in range(2)])
    cfg = DataSection(sources=[DataSource(path=math_rows, name="math", weight=3.0),
                               DataSource(path=code_rows, name="code", weight=1.0)])
    rows = load_examples(cfg)
    # scale = max(9/3, 2/1) = 3: math keeps its 9 rows, code gets 3 places (its 2 rows cycled)
    assert [t.id for t in rows] == [f"m{i}" for i in range(9)] + ["c0", "c1", "c0"]
    drawn = Counter(rows[i].source for i in PromptSampler(len(rows), 4, seed=0).next(len(rows) * 50))
    assert drawn == {"math": 9 * 50, "code": 3 * 50}  # 3 : 1, every epoch
    assert load_examples(cfg, weighted=False) == rows[:11]  # evaluation: each row once, in order
    even = load_examples(DataSection(sources=[DataSource(path=math_rows, weight=1.0), DataSource(path=code_rows, weight=1.0)]))
    assert Counter(t.id[0] for t in even) == {"m": 9, "c": 9}  # the small source repeats (c0 5x, c1 4x), none dropped
    assert Counter(t.id for t in even if t.id[0] == "c") == {"c0": 5, "c1": 4}


def test_source_weights_are_all_or_none_and_positive(tmp_path):
    from pydantic import ValidationError

    from cohort.trainer.data import mix_sources

    rows = _jsonl(tmp_path / "m.jsonl", [{"prompt": "1+1=", "answer": 2}])
    with pytest.raises(ValidationError, match="give every source a `weight`, or none"):
        DataSection(sources=[DataSource(path=rows, weight=2.0), DataSource(path=rows)])
    with pytest.raises(ValidationError, match="greater than 0"):
        DataSource(path=rows, weight=0)
    plain = load_examples(DataSection(sources=[DataSource(path=rows), DataSource(path=rows)]))
    assert len(plain) == 2  # no weights: concatenated as before
    one = Task.with_answer("x", "1")
    with pytest.raises(ValueError, match="would list"):
        mix_sources([[one] * 1000, [one]], [1.0, 1e6])


def test_generated_code_asserts_reach_both_branches_of_a_predicate():
    """``return False`` (or ``str(n)`` for fizz) must not pass every hidden assert of a row."""
    rows = code_functions_task(CodeFunctionsTask(num_prompts=400, seed=0))
    checked = 0
    for t in rows:
        asserts = t.reference.code_tests.asserts
        outputs = {a.split(" == ", 1)[1] for a in asserts}
        if asserts[0].startswith("assert is_multiple_of_"):
            assert outputs == {"True", "False"}, asserts
            checked += 1
        elif asserts[0].startswith("assert fizz_"):
            assert "'Fizz'" in outputs and len(outputs) >= 2, asserts
            checked += 1
    assert checked >= 40


@pytest.mark.parametrize("name, rows, verifier", [("smollm2-multistep", 300, ("math",)),
                                                  ("smollm2-multistep-addsub", 300, ("math",)),
                                                  ("smollm2-multistep-add", 300, ("math", "steps")),
                                                  ("smollm2-code", 256, ("code",))])
def test_reasoning_example_configs_load_and_route_their_rows(name, rows, verifier):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    cfg = load_config(root / "examples" / f"{name}.yaml")
    sources = [DataSource(**{**s.model_dump(exclude_unset=True), "path": str(root / s.path)}) for s in cfg.data.sources]
    tasks = load_examples(DataSection(sources=sources))
    assert len(tasks) == rows and all(t.messages is not None for t in tasks)
    defaults = {v.name: (v.weight, v.options) for v in cfg.scoring.verifiers}
    assert {tuple(r.name for r in route(t, defaults, None)) for t in tasks} == {verifier}
