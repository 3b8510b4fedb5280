"""docs/remote-verifiers.md's mutual-TLS recipe, run as written (its ``bash`` block, with the ``openssl`` of
this machine), then used: a ``cohort serve`` with its server certificate admits the trainer's client
certificate and refuses a client without one, on 127.0.0.1."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cohort.rpc.launch import ServiceProcess
from cohort.rpc.tls import ClientTls
from cohort.verifiers.base import GroupRequest, Reference, Rollout, Verdict
from cohort.verifiers.client import VerifierClient, WeightedVerifier

ROOT = Path(__file__).resolve().parents[2]
HEADING = "### Making the certificates (a recipe)"

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="the recipe needs the openssl command")


def recipe() -> str:
    text = (ROOT / "docs" / "remote-verifiers.md").read_text()
    assert HEADING in text, f"docs/remote-verifiers.md lost its section {HEADING!r}"
    block = re.search(r"```bash\n(.*?)```", text.split(HEADING, 1)[1], re.S)
    assert block is not None
    return block.group(1)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("recipe")
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", recipe()], cwd=folder, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "tls.crt: OK" in out.stdout and "client.crt: OK" in out.stdout  # the recipe's own openssl verify
    return folder


def test_the_recipe_makes_what_the_doc_says(made):
    for name in ("ca.crt", "ca.key", "tls.crt", "tls.key", "client.crt", "client.key"):
        assert (made / name).read_bytes().startswith(b"-----BEGIN "), name


def test_a_server_with_the_recipes_files_admits_the_trainer_only(made):
    trainer = ClientTls(ca=str(made / "ca.crt"), cert=str(made / "client.crt"), key=str(made / "client.key"))
    args = ["--tls-cert", str(made / "tls.crt"), "--tls-key", str(made / "tls.key"), "--client-ca", str(made / "ca.crt")]
    with ServiceProcess(["arith"], extra_args=args, tls=trainer) as server:
        async def score() -> list[Verdict]:
            async with VerifierClient([WeightedVerifier("arith", 1.0, (server.endpoint,), tls=trainer)],
                                      timeout_s=10, retries=0) as client:
                await client.handshake()
                [group] = await client.verify_groups([GroupRequest("arith", (Rollout(0, "5"), Rollout(1, "6")),
                                                                   Reference(answer="5"), "g0")])
                return [r.verdict for r in group.results]

        assert asyncio.run(score()) == [Verdict.CORRECT, Verdict.INCORRECT]
        cli = [sys.executable, "-m", "cohort.cli", "health", server.endpoint, "--tls-ca", str(made / "ca.crt")]
        ok = subprocess.run([*cli, "--tls-cert", str(made / "client.crt"), "--tls-key", str(made / "client.key")],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert ok.returncode == 0 and "SERVING" in ok.stdout, ok.stderr
        # the name the recipe put in subjectAltName, checked by the client
        named = subprocess.run([*cli, "--tls-cert", str(made / "client.crt"), "--tls-key", str(made / "client.key"),
                                "--tls-server-name", "verifier-math"], capture_output=True, text=True, timeout=60,
                               cwd=ROOT)
        assert named.returncode == 0, named.stderr
        refused = subprocess.run(cli, capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert refused.returncode == 1
        assert "requires a client certificate (mutual TLS)" in refused.stderr, refused.stderr
