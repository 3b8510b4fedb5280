"""docs/deploy.md's steps from a fresh Debian machine stay true without running containers here (the
``container`` marker does that): the packages and podman settings it names are the ones
``deploy/ci-setup-podman.sh`` installs and writes; that script writes the system's containers.conf only
saying so (and can leave it alone); every shell block parses; the flags it uses exist; and the rows of
its step 6 score as the page says against local services on 127.0.0.1."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cohort.rpc.launch import ServiceProcess

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "deploy.md").read_text()
SECTION = DOC.split("### From a fresh Debian 12 machine", 1)[1].split("**Kubernetes.**", 1)[0]
SETUP = (ROOT / "deploy" / "ci-setup-podman.sh").read_text()


def blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```$", text, re.S | re.M)  # a fence closes only at the start of a line


def test_the_steps_install_what_the_ci_script_installs():
    script_pkgs = set(re.search(r"apt-get install -y -q (.*)", SETUP).group(1).split())
    doc_pkgs = set(re.search(r"apt-get install -y (.*)", SECTION).group(1).split())
    assert script_pkgs <= doc_pkgs, script_pkgs - doc_pkgs


def test_the_settings_table_is_what_the_ci_script_writes():
    written = dict(re.findall(r"^(\w+) = (.+)$", SETUP.split("<<CONF", 1)[1].split("\nCONF", 1)[0], re.M))
    documented = dict(re.findall(r"^\| `(\w+) = (.+?)` \|", SECTION, re.M))
    assert written == documented and len(written) == 3


def test_every_shell_block_parses():
    for block in blocks(SECTION):
        out = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
        assert out.returncode == 0, f"{out.stderr}\n{block}"


def test_what_the_steps_rely_on_exists():
    assert 'BASE_IMAGE:-}" == local' in (ROOT / "deploy" / "build.sh").read_text()
    assert "COHORT_TORCH_WHEEL" in (ROOT / "deploy" / "build.sh").read_text()
    assert (ROOT / "deploy" / "build-base.sh").exists()
    assert "COHORT_CONTAINERS_CONF" in SETUP and "COHORT_CONTAINERS_CONF=keep" in SECTION
    helps = subprocess.run([sys.executable, "-m", "cohort.cli", "health", "--help"], capture_output=True, text=True)
    assert "--service" in helps.stdout and "--timeout" in helps.stdout


@pytest.mark.parametrize("existing", [None, "[engine]\nruntime = \"crun\"\n"])
def test_the_ci_script_says_when_it_writes_the_system_config_and_can_leave_it_alone(tmp_path, existing):
    """The script's containers.conf block, run on a file of our own (the rest of it installs podman)."""
    block = SETUP[SETUP.index("conf=/etc/containers/containers.conf"):SETUP.index("podman info --format")]
    conf = tmp_path / "containers.conf"
    block = block.replace("conf=/etc/containers/containers.conf", f"conf={conf}", 1)
    if existing is not None:
        conf.write_text(existing)
    kept = subprocess.run(["bash", "-euo", "pipefail", "-c", block], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env={"COHORT_CONTAINERS_CONF": "keep", "PATH": "/usr/bin:/bin"})
    assert kept.returncode == 0 and "left" in kept.stderr and 'runtime = "runc"' in kept.stderr
    assert (conf.read_text() if conf.exists() else None) == existing
    wrote = subprocess.run(["bash", "-euo", "pipefail", "-c", block], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})
    assert wrote.returncode == 0 and f"wrote {conf}" in wrote.stderr, wrote.stderr
    assert 'runtime = "runc"' in conf.read_text()
    if existing is not None:
        assert conf.with_name("containers.conf.cohort-backup").read_text() == existing
        assert "the previous file is" in wrote.stderr


def test_step_6_rows_score_as_the_page_says(tmp_path):
    step6 = next(b for b in blocks(SECTION) if "rollouts.jsonl <<'ROWS'" in b)
    rows = tmp_path / "rollouts.jsonl"
    rows.write_text(step6.split("<<'ROWS'\n", 1)[1].split("ROWS\n", 1)[0])
    with ServiceProcess(["sandbox"]) as sandbox, ServiceProcess(["math"]) as math, \
            ServiceProcess(["format"]) as fmt, \
            ServiceProcess(["code"], env={"COHORT_SANDBOX_ENDPOINT": sandbox.endpoint}) as code:
        out = subprocess.run([sys.executable, "-m", "cohort.cli", "verify", str(rows), "-e", f"math={math.endpoint}",
                              "-e", f"format={fmt.endpoint}", "-e", f"code={code.endpoint}"],
                             capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    table = [line.split("\t") for line in out.stdout.splitlines()]
    assert table[0][:5] == ["group", "idx", "math", "format", "code"]
    got = {(r[0], r[1]): (r[2], r[4]) for r in table[1:5]}
    assert got == {("sum", "0"): ("1 correct", "-"), ("sum", "1"): ("0 incorrect", "-"),
                   ("add", "0"): ("-", "1 correct"), ("add", "1"): ("-", "0 incorrect")}
    assert out.stdout.rstrip().endswith("statuses {'ok': 4}")
