"""Only the trainer gets in: TLS and mutual TLS through gRPC's own credentials, on loopback.

Real servers (``cohort serve ... --tls-cert --tls-key --client-ca``) in subprocesses, real clients
(``VerifierClient``, the code verifier's sandbox client, the conformance kit, the trainer), a PKI
made at test time (``conftest.py``). A client with a certificate from our CA is served; one without
a certificate, or with a certificate from another CA, is refused and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort.rpc.launch import ServiceProcess, health_status
from cohort.rpc.tls import ClientTls, ServerTls, TlsError, channel
from cohort.verifiers.base import CodeTests, GroupRequest, Reference, Rollout, RolloutStatus, Verdict
from cohort.verifiers.client import HandshakeError, VerifierClient, WeightedVerifier

ROOT = Path(__file__).resolve().parents[2]
REFUSED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAUTHENTICATED)


def trainer_tls(pki) -> ClientTls:
    return ClientTls(ca=str(pki.ca), cert=str(pki.client_cert), key=str(pki.client_key))


@pytest.fixture(scope="module")
def mtls_server(pki):
    """``math`` and ``arith`` (the embedded default's verifiers) behind mutual TLS."""
    with ServiceProcess(["math", "arith"], extra_args=[*pki.server_args(), "--log-level", "WARNING"],
                        tls=trainer_tls(pki)) as proc:
        yield proc


def arith_group(gid: str = "g0") -> GroupRequest:
    return GroupRequest("arith", (Rollout(0, "5"), Rollout(1, "6")), Reference(answer="5"), gid)


def list_verifiers(endpoint: str, tls: ClientTls | None) -> pb.ListVerifiersResponse:
    with channel(endpoint, tls) as ch:
        return pb_grpc.VerifierServiceStub(ch).ListVerifiers(pb.ListVerifiersRequest(), timeout=5)


def assert_still_serving(server: ServiceProcess, pki) -> None:
    assert server.proc.poll() is None
    assert {v.name for v in list_verifiers(server.endpoint, trainer_tls(pki)).verifiers} == {"math", "arith"}


def test_client_with_a_certificate_from_our_ca_is_served(mtls_server, pki):
    async def run():
        verifier = WeightedVerifier("arith", 1.0, (mtls_server.endpoint,), tls=trainer_tls(pki))
        async with VerifierClient([verifier], timeout_s=10, retries=0) as client:
            versions = await client.handshake()
            return versions, await client.verify_groups([arith_group()])

    versions, [result] = asyncio.run(run())
    assert "arith" in versions
    assert [r.status for r in result.results] == [RolloutStatus.OK, RolloutStatus.OK]
    assert [r.verdict for r in result.results] == [Verdict.CORRECT, Verdict.INCORRECT]
    assert health_status(mtls_server.endpoint, "arith", tls=trainer_tls(pki)) == "SERVING"


@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate"])
def test_client_without_our_certificate_is_refused_and_the_server_keeps_serving(mtls_server, pki, who):
    tls = (ClientTls(ca=str(pki.ca)) if who == "no certificate"
           else ClientTls(ca=str(pki.ca), cert=str(pki.other_client_cert), key=str(pki.other_client_key)))
    for _ in range(3):
        with pytest.raises(grpc.RpcError) as info:
            list_verifiers(mtls_server.endpoint, tls)
        assert info.value.code() in REFUSED, info.value
    with pytest.raises(grpc.RpcError) as info:
        health_status(mtls_server.endpoint, tls=tls)
    assert info.value.code() in REFUSED
    assert_still_serving(mtls_server, pki)


def test_client_refuses_a_server_certificate_from_another_ca(mtls_server, pki):
    tls = ClientTls(ca=str(pki.other_ca), cert=str(pki.client_cert), key=str(pki.client_key))
    with pytest.raises(grpc.RpcError) as info:
        list_verifiers(mtls_server.endpoint, tls)
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE
    assert_still_serving(mtls_server, pki)


def test_plaintext_client_to_a_tls_server_fails_clearly_and_never_scores_zero(mtls_server, pki):
    async def run():
        async with VerifierClient({"arith": [mtls_server.endpoint]}, timeout_s=3, retries=1, backoff_s=0.01) as client:
            with pytest.raises(HandshakeError) as info:
                await client.handshake(timeout_s=3)
            return str(info.value), await client.verify_groups([arith_group()])

    message, [result] = asyncio.run(run())
    assert mtls_server.endpoint in message and "UNAVAILABLE" in message
    assert "requires mutual TLS and this client is plaintext" in message  # test_connection_errors.py: every cause
    assert {r.status for r in result.results} == {RolloutStatus.DEPENDENCY_UNAVAILABLE}
    assert_still_serving(mtls_server, pki)


def cohort(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cohort.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env)


def test_cli_health_speaks_tls(mtls_server, pki):
    ok = cohort("health", mtls_server.endpoint, "--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert),
                "--tls-key", str(pki.client_key))
    assert ok.returncode == 0 and "SERVING" in ok.stdout, ok.stdout + ok.stderr
    plain = cohort("health", mtls_server.endpoint, "--timeout", "2")
    assert plain.returncode == 1 and "UNAVAILABLE" in plain.stderr
    assert "requires mutual TLS and this client is plaintext" in plain.stderr, plain.stderr


def test_container_healthcheck_speaks_tls_from_its_environment(mtls_server, pki):
    import os

    script = [sys.executable, str(ROOT / "deploy" / "healthcheck.py"), mtls_server.endpoint, "--timeout", "3"]
    env = {**os.environ, "COHORT_HEALTH_TLS_CA": str(pki.ca), "COHORT_HEALTH_TLS_CERT": str(pki.client_cert),
           "COHORT_HEALTH_TLS_KEY": str(pki.client_key)}
    ok = subprocess.run(script, capture_output=True, text=True, timeout=60, env=env)
    assert ok.returncode == 0 and "SERVING" in ok.stderr, ok.stderr
    plain = subprocess.run(script, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 1 and "UNAVAILABLE" in plain.stderr
    assert "requires mutual TLS and this client is plaintext" in plain.stderr, plain.stderr
    env["COHORT_HEALTH_TLS_KEY"] = "/nonexistent.key"
    bad = subprocess.run(script, capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode == 1 and "TLS key /nonexistent.key: no such file" in bad.stderr, bad.stderr


def test_cli_verify_speaks_mutual_tls(mtls_server, pki, tmp_path):
    records = tmp_path / "r.jsonl"
    records.write_text('{"group_id": "a", "answer": "5", "rollouts": ["5", "6"]}\n')
    out = cohort("verify", str(records), "-e", f"arith={mtls_server.endpoint}", "--json", "--tls-ca", str(pki.ca),
                 "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key))
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["verifiers"]["arith"]["verdict"] for r in rows] == ["correct", "incorrect"], out.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--tls-cert", "/nonexistent/server.crt", "--tls-key", "/nonexistent/server.key"], "TLS certificate /nonexistent/server.crt: no such file"),
    (["--tls-cert", "{cert}"], "--tls-cert and --tls-key go together"),
    (["--tls-cert", "{cert}", "--tls-key", "{key}", "--client-ca", "{empty}"], "client CA {empty}: empty"),
    (["--tls-cert", "{cert}", "--tls-key", "{notpem}"], "TLS key {notpem}: not a PEM file (no -----BEGIN line)"),
    (["--tls-cert", "{cert}", "--tls-key", "{key}", "--client-ca", "{dir}"], "client CA {dir}: is a directory, expected a PEM file"),
])
def test_serve_names_a_bad_certificate_file_in_one_line(pki, tmp_path, args, message):
    empty, notpem = tmp_path / "empty.pem", tmp_path / "notpem.pem"
    empty.write_text("")
    notpem.write_text("hello")
    fill = {"cert": pki.server_cert, "key": pki.server_key, "empty": empty, "notpem": notpem, "dir": tmp_path}
    args = [a.format(**fill) for a in args]
    out = cohort("serve", "format", "--port", "0", *args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines == [f"error: {message.format(**fill)}"], out.stderr


def test_client_tls_errors_are_one_line(pki, tmp_path):
    with pytest.raises(TlsError, match=r"^CA /nope/ca.pem: no such file$"):
        ClientTls.from_options(ca="/nope/ca.pem")
    with pytest.raises(TlsError, match="go together"):
        ClientTls(ca=str(pki.ca), cert=str(pki.client_cert))
    assert ClientTls.from_env("COHORT_X_TLS_", {}) is None
    assert ServerTls.from_options(None, None) is None
    assert ClientTls.from_env("P_", {"P_CA": str(pki.ca)}) == ClientTls(ca=str(pki.ca))
    out = cohort("health", "127.0.0.1:1", "--tls-ca", str(tmp_path / "missing.pem"))
    assert out.returncode == 2 and out.stderr.strip() == f"error: CA {tmp_path / 'missing.pem'}: no such file"


def test_code_verifier_names_a_bad_sandbox_tls_file_at_startup(tmp_path):
    import os

    env = {**os.environ, "COHORT_SANDBOX_ENDPOINT": "127.0.0.1:1", "COHORT_SANDBOX_TLS_CA": str(tmp_path / "ca.pem")}
    out = cohort("serve", "code", "--port", "0", env=env)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [f"cohort serve verifiers: verifiers.code.sandbox_tls (COHORT_SANDBOX_TLS_CA): "
                                       f"CA {tmp_path / 'ca.pem'}: no such file"]
    assert "Traceback" not in out.stderr


def test_conformance_kit_over_mutual_tls(mtls_server, pki):
    from cohort.conformance import KitOptions, load_cases, run_kit

    cases = load_cases(ROOT / "tests" / "conformance" / "cases" / "math.jsonl", "math")
    rules = ["health", "reflection", "list_verifiers", "known_answers"]
    results = run_kit(mtls_server.endpoint, "math", cases, rules=rules, options=KitOptions(tls=trainer_tls(pki)))
    assert {r.rule: r.status for r in results} == dict.fromkeys(rules, "pass"), results
    out = cohort("conformance", mtls_server.endpoint, "--verifier", "math", "--rule", "health",
                 "--cases", str(ROOT / "tests" / "conformance" / "cases" / "math.jsonl"), "--connect-timeout", "2")
    assert out.returncode == 2  # plaintext cannot even connect
    assert "cannot connect" in out.stderr and "requires mutual TLS and this client is plaintext" in out.stderr


def test_code_verifier_reaches_the_sandbox_over_mutual_tls(pki):
    """`cohort serve sandbox` with mutual TLS; the code verifier's client from COHORT_SANDBOX_TLS_*."""
    from cohort.verifiers.code.backend import GrpcBackend
    from cohort.verifiers.code.verifier import CodeVerifier
    from cohort.verifiers.base import VerifyContext

    tests = CodeTests("asserts", asserts=("assert add(1, 2) == 3",))
    group = GroupRequest("code", (Rollout(0, "```python\ndef add(a, b):\n    return a + b\n```"),
                                  Rollout(1, "```python\ndef add(a, b):\n    return 0\n```")), Reference(code_tests=tests))
    env = {"COHORT_SANDBOX_POOL_SIZE": "2"}
    with ServiceProcess(["sandbox"], extra_args=pki.server_args(), env=env, tls=trainer_tls(pki)) as sandbox:
        tls_env = {"COHORT_SANDBOX_TLS_CA": str(pki.ca), "COHORT_SANDBOX_TLS_CERT": str(pki.client_cert),
                   "COHORT_SANDBOX_TLS_KEY": str(pki.client_key)}
        backend = GrpcBackend(sandbox.endpoint, tls=ClientTls.from_env("COHORT_SANDBOX_TLS_", tls_env))
        results = CodeVerifier(backend=backend, max_parallel=2).verify_group(group, VerifyContext())
        assert [(r.status, r.verdict) for r in results] == [(RolloutStatus.OK, Verdict.CORRECT),
                                                            (RolloutStatus.OK, Verdict.INCORRECT)]
        plain = CodeVerifier(backend=GrpcBackend(sandbox.endpoint, tls=None), max_parallel=2).verify_group(group, VerifyContext())
        assert {r.status for r in plain} == {RolloutStatus.DEPENDENCY_UNAVAILABLE}  # refused: masked, never 0
        # the whole path through a code verifier server, configured by environment only
        with ServiceProcess(["code"], env={"COHORT_SANDBOX_ENDPOINT": sandbox.endpoint, **tls_env}) as code:
            async def run():
                async with VerifierClient({"code": [code.endpoint]}, timeout_s=60, retries=0) as client:
                    return await client.verify_groups([group])

            [result] = asyncio.run(run())
            assert [r.verdict for r in result.results] == [Verdict.CORRECT, Verdict.INCORRECT]
            assert {r.status for r in result.results} == {RolloutStatus.OK}


def test_a_training_step_against_verifiers_behind_mutual_tls(mtls_server, pki, tmp_path):
    """The embedded default's verifiers (math, arith), remote and behind mutual TLS, for one step."""
    from cohort.trainer.config import load_config
    from cohort.trainer.train import train

    tls = f"{{ca: '{pki.ca}', cert: '{pki.client_cert}', key: '{pki.client_key}'}}"
    ep = mtls_server.endpoint
    cfg = load_config(None, [
        "model.tiny={hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 2}",
        "data.arithmetic={num_prompts: 16, max_operand: 4}",
        f'scoring.verifiers=[{{name: math, weight: 0.8, endpoints: ["{ep}"], tls: {tls}}}, '
        f'{{name: arith, weight: 0.2, endpoints: ["{ep}"], tls: {tls}, '
        'options: {correct_weight: "0", format_weight: "1", require_eos: "1"}}]',
        "scoring.local_services=false", "grpo.prompts_per_step=2", "grpo.num_generations=4",
        "run.max_steps=1", "run.torch_threads=1", "run.progress=false", f"run.output_dir={tmp_path}",
    ])
    records = train(cfg, {"math": [ep], "arith": [ep]})
    assert [r["step"] for r in records] == [1]
    assert records[0]["verify/unusable_frac"] == 0.0
    assert "reward/math" in records[0] and "reward/arith" in records[0]


def test_training_names_a_missing_tls_file_before_anything_starts(pki, tmp_path):
    from cohort.trainer.config import load_config
    from cohort.trainer.train import run

    missing = tmp_path / "trainer.key"
    cfg = load_config(None, [
        f"scoring.verifiers=[{{name: math, endpoints: ['127.0.0.1:1'], tls: {{ca: '{pki.ca}', cert: '{pki.client_cert}', "
        f"key: '{missing}'}}}}]", f"run.output_dir={tmp_path / 'run'}"])
    with pytest.raises(TlsError, match=f"^TLS key {missing}: no such file$"):
        run(cfg)
    assert not (tmp_path / "run").exists()  # nothing was started or written


def test_trainer_config_rejects_tls_without_endpoints(pki):
    from pydantic import ValidationError

    from cohort.trainer.config import load_config

    with pytest.raises(ValidationError, match="tls needs endpoints"):
        load_config(None, [f"scoring.verifiers=[{{name: math, tls: {{ca: '{pki.ca}'}}}}]"])
    with pytest.raises(ValidationError, match="`cert` and `key` go together"):
        load_config(None, [f"scoring.verifiers=[{{name: math, endpoints: [a:1], tls: {{cert: '{pki.client_cert}'}}}}]"])
