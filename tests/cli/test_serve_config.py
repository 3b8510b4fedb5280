"""``cohort serve`` configured by a serve config file (cli/serve_config.py): real servers on loopback, a real
call to each verifier; a key nobody knows refused in one line (exit 2); the environment's ``COHORT_*``
variables still override the file, and every one of them has a key."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import yaml

from cohort.cli.serve_config import ENV_KEYS, ServeConfig, ServeConfigError, load_serve_config
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc
from cohort.rpc.launch import ServiceProcess
from cohort.verifiers import registry

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("openai_standin", ROOT / "tests" / "verifiers" / "openai_standin.py")
_standin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_standin)


def _group(verifier: str, completions: list[str], reference: pb.Reference, prompt: str = "") -> pb.VerifyGroupRequest:
    return pb.VerifyGroupRequest(group_id="g", verifier=verifier, prompt=prompt, reference=reference,
                                 rollouts=[pb.Rollout(index=i, completion=c) for i, c in enumerate(completions)])


def test_one_config_file_serves_math_code_judge_and_format(tmp_path):
    """`cohort serve verifiers --config FILE` without names hosts the file's verifiers, each with its options;
    the judge's url comes from COHORT_JUDGE_URL, over the file's (a port nobody listens on)."""
    with _standin.StandIn() as standin:
        config = tmp_path / "serve.yaml"
        config.write_text(yaml.safe_dump({
            "server": {"log_level": "WARNING"},
            "limits": {"workers": 4},
            "verifiers": {
                "math": {"workers": 1, "cache_size": 0},
                "code": {"pool_size": 1},
                "judge": {"backend": "openai", "url": "http://127.0.0.1:9/v1", "model": "standin", "timeout_s": 30},
                "format": None,
            },
        }))
        svc = ServiceProcess(["verifiers"], extra_args=["--config", str(config)], env={"COHORT_JUDGE_URL": standin.url})
        svc.start(timeout_s=120)  # math's first SymPy worker on a loaded machine
        try:
            _call_each(svc.endpoint, standin)
        finally:
            svc.stop()


def _call_each(endpoint: str, standin) -> None:
    with grpc.insecure_channel(endpoint) as channel:
        stub = pb_grpc.VerifierServiceStub(channel)
        served = [v.name for v in stub.ListVerifiers(pb.ListVerifiersRequest(), timeout=30).verifiers]
        assert sorted(served) == ["code", "format", "judge", "math"]

        def rewards(request: pb.VerifyGroupRequest) -> list[float]:
            return [r.reward for r in stub.VerifyGroup(request, timeout=60).results]

        assert rewards(_group("math", ["so \\boxed{1/2}", "so \\boxed{0.6}"], pb.Reference(answer="0.5"))) == [1.0, 0.0]
        tests = pb.CodeTests(asserts=pb.AssertTests(asserts=["assert inc(1) == 2", "assert inc(5) == 6"]))
        code = _group("code", ["def inc(x): return x + 1", "def inc(x): return 2"], pb.Reference(code_tests=tests))
        assert rewards(code) == [1.0, 0.5]
        judge = _group("judge", ["3 + 4 = 7, so the answer is 7.", "3 + 4 = 9, so the answer is 9."],
                       pb.Reference(answer="7"), "What is 3 + 4?")
        assert rewards(judge) == [1.0, 0.0]
        assert standin.requests, "the judge asked the stand-in the environment named, not the file's url"
        layout = _group("format", ["<think>2+2</think><answer>4</answer>", "<answer>4</answer><answer>5</answer>"],
                        pb.Reference())
        assert rewards(layout) == [1.0, 0.0]


@pytest.mark.parametrize(("kind", "text", "line"), [
    ("verifiers", "verifiers:\n  math: {worker: 2}\n",
     "cohort serve verifiers: unknown key verifiers.math.worker (did you mean verifiers.math.workers?)"),
    ("verifiers", "limit: {workers: 2}\nverifiers: {format: {}}\n",
     "cohort serve verifiers: unknown key limit (did you mean limits?)"),
    ("verifiers", "verifiers:\n  code: {sandbox_tls: {ca_file: x}}\n",
     "cohort serve verifiers: unknown key verifiers.code.sandbox_tls.ca_file (known keys here: ca, cert, key, server_name)"),
    ("sandbox", "sandbox: {python_tool: {wall: 3}}\n",
     "cohort serve sandbox: unknown key sandbox.python_tool.wall (did you mean sandbox.python_tool.wall_s?)"),
    ("tools", "tools: {names: [abacus]}\n", "cohort serve tools: tools.names.0: Input should be 'calculator' (got 'abacus')"),
])
def test_an_unknown_key_is_refused_in_one_line_with_exit_2(tmp_path, kind, text, line):
    (tmp_path / "serve.yaml").write_text(text)
    r = subprocess.run([sys.executable, "-m", "cohort.cli", "serve", kind, "--config", str(tmp_path / "serve.yaml"),
                        "--port", "0"], capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr.splitlines()) == (2, [line])


def test_the_environment_overrides_the_file_and_flags_override_both(tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("server: {port: 7000}\nverifiers:\n  math: {workers: 4, memory_mb: 1024}\n")
    cfg = load_serve_config(config, environ={"COHORT_MATH_WORKERS": "2", "COHORT_SANDBOX_POOL_SIZE": "3"})
    math = registry.parse_options("math", registry.factory("math"), cfg.verifiers["math"])
    assert (math.workers, math.memory_mb) == (2, 1024)  # the variable over the file, the file's other keys kept
    assert cfg.sandbox.pool_size == 3 and cfg.verifiers["code"] == {"pool_size": "3"}
    assert cfg.listed == ("math",)  # the environment gives options, never a verifier to serve
    flagged = load_serve_config(config, environ={}, overrides={"server.port": 0, "verifiers.math.workers": 1})
    assert (flagged.server.port, flagged.verifiers["math"]["workers"]) == (0, 1)
    with pytest.raises(ServeConfigError, match=r"^allow: Input should be a valid tuple"):
        load_serve_config(None, environ={}, overrides={"allow": "math"})
    assert load_serve_config(None, environ={"COHORT_VERIFIERS_ALLOW": "math, format"}).allow == ("math", "format")


def test_every_former_variable_has_a_key_that_exists():
    """Each COHORT_* setting the services read before the serve config maps to a key of the config or of its
    verifier's options model; what is left in the source is not a service setting."""
    for variable, keys in ENV_KEYS.items():
        for key in keys:
            section, *rest = key.split(".")
            if section == "verifiers":
                name, *path = rest
                model = registry.options_model(registry.factory(name))
            else:
                model, path = ServeConfig, [section, *rest]
            for part in path[:-1]:
                model = model.model_fields[part].annotation
            assert path[-1] in model.model_fields, f"{variable} -> {key}: no such key"
    source = subprocess.run(["grep", "-rhoE", r"COHORT_[A-Z_]+", "--include=*.py", "verifiers", "sandbox", "tools", "rpc",
                             "cli"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    not_settings = {
        "COHORT_PARENT_FD",  # rpc/launch.py: the pipe a launched server watches, set by its parent
        "COHORT_STATUS",  # verifiers/interop/remote.py: a prefix in an ORS error's text, not a variable
        "COHORT_HEALTH_TLS_",  # deploy/healthcheck.py's client
    }
    prefixes = ("COHORT_JUDGE_", "COHORT_RG_", "COHORT_SANDBOX_TLS_", "COHORT_NEMO_GYM_", "COHORT_ORS_", "COHORT_OPENENV_",
                "COHORT_PRIME_")
    left = {v for v in source if v not in ENV_KEYS and v not in not_settings and v not in prefixes}
    assert not left, f"COHORT_* names in the source without a serve-config key: {sorted(left)}"
    assert not {v for v in source if re.fullmatch(r"COHORT_(MATH|JUDGE|RG)_[A-Z_]+", v)} - set(ENV_KEYS)


def test_the_documented_and_deployed_configs_validate(tmp_path):
    """The example of docs/config.md ("Serve config") and the file the Kubernetes manifests mount load as
    `cohort serve` loads them, and each verifier's options pass its model."""
    page = (ROOT / "docs" / "config.md").read_text().split("\n# Serve config\n", 1)[1]
    example = re.search(r"```yaml\n(.*?)```", page, re.DOTALL).group(1)
    deployed = ROOT / "deploy" / "k8s" / "base" / "serve.yaml"
    for i, text in enumerate((example, deployed.read_text())):
        (tmp_path / f"{i}.yaml").write_text(text)
        cfg = load_serve_config(tmp_path / f"{i}.yaml", environ={})
        assert {"math", "code"} <= set(cfg.listed)
        for name, given in cfg.verifiers.items():
            registry.parse_options(name, registry.factory(name), given)
