"""The images, run for real: build with podman, start the compose services as containers, score.

What this proves (marker ``container``; root needed, ``deploy/ci-setup-podman.sh`` installs and
configures podman itself):

- The images build from a clean machine (the base image comes from debootstrap, since no registry
  is reachable) and their HEALTHCHECK and gRPC health answer SERVING.
- ``cohort verify`` scores a batch against the containers: math, format, and code through the
  sandbox container, including hostile programs that must not escape (network, the service's
  environment and processes, the container's filesystem) and resource bombs that must come back as
  policy failures while the sandbox stays healthy.
- A verifier replica SIGKILLed during scoring: the client fails over and every rollout is scored.
- The trainer image trains against the verifier containers.
- Nothing is left running afterwards.

Containers are started from ``deploy/compose.yaml`` (image, command, environment, read-only root,
tmpfs, dropped capabilities, security options), so this runs what the compose file ships.
Measurements (build, start times, image sizes) go to stdout and to ``$COHORT_DEPLOY_REPORT``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

# Image builds happen in fixtures, so the first test that needs one carries the build time.
pytestmark = [pytest.mark.container, pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RUN_ID = f"cohort-test-{os.getpid()}"
LABEL = f"cohort.test={RUN_ID}"
TAG = "test"
GRPC_PORT = 50051
METRICS_PORT = 9090
MEASURED: dict[str, object] = {}


# ------------------------------------------------------------------------------ podman helpers
def podman(*args: str, check: bool = True, timeout: float = 120, input: str | None = None) -> subprocess.CompletedProcess:
    out = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, input=input)
    if check and out.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


def _leftovers() -> list[str]:
    names = podman("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}").stdout.split()
    nets = [n for n in podman("network", "ls", "--format", "{{.Name}}").stdout.split() if n == RUN_ID]
    vols = podman("volume", "ls", "--filter", f"label={LABEL}", "--format", "{{.Name}}").stdout.split()
    return names + nets + vols


def _expand(text: str) -> str:
    """Compose-style ``${VAR:-default}``, with the image tag this test builds."""
    env = {**os.environ, "COHORT_TAG": TAG}
    return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: env.get(m.group(1)) or m.group(2), text)


@dataclass
class Container:
    name: str
    service: str
    ports: dict[int, int] = field(default_factory=dict)  # container port -> 127.0.0.1 host port

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.ports[GRPC_PORT]}"


class Stack:
    """Containers of deploy/compose.yaml services on a private podman network, all labelled for cleanup."""

    def __init__(self) -> None:
        self.compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
        self.network = RUN_ID
        self.containers: dict[str, Container] = {}

    def __getitem__(self, key: str) -> Container:
        return self.containers[key]

    def create_network(self) -> None:
        podman("network", "create", "--label", LABEL, self.network)

    @property
    def gateway(self) -> str:
        out = podman("network", "inspect", self.network, "--format", "{{range .Subnets}}{{.Gateway}}{{end}}")
        return out.stdout.strip()

    def run_args(self, service: str, name: str, extra_env: dict[str, str], extra_ports: tuple[int, ...],
                 detach: bool = True, alias: str | None = None, security_opt: list[str] | None = None) -> list[str]:
        """``podman run`` options and image for a compose service (the command goes after)."""
        svc = self.compose["services"][service]
        args = ["run", "-d" if detach else "--rm", "--name", name, "--label", LABEL, "--network", self.network,
                "--network-alias", alias or service, "--health-interval", "disable"]  # checks run on demand below
        if svc.get("read_only"):
            args.append("--read-only")
        for mount in svc.get("tmpfs", []):
            args += ["--tmpfs", mount]
        for cap in svc.get("cap_drop", []):
            args += ["--cap-drop", cap]
        for opt in svc.get("security_opt", []) if security_opt is None else security_opt:
            args += ["--security-opt", opt]
        for key, value in {**svc.get("environment", {}), **extra_env}.items():
            args += ["-e", f"{key}={value}"]
        for volume in svc.get("volumes", []):
            src, dst, *mode = volume.split(":")
            if src.startswith("."):
                src = str((DEPLOY / src).resolve())
            else:  # a named volume: one per test run
                src = f"{RUN_ID}-{src}"
                podman("volume", "create", "--label", LABEL, src)
            args += ["-v", ":".join([src, dst, *mode])]
        published = {int(p.rsplit(":", 1)[1]) for p in svc.get("ports", [])} | set(extra_ports)
        for port in sorted(published):
            args += ["-p", f"127.0.0.1::{port}"]
        return args + [_expand(svc["image"])]

    def start(self, key: str, service: str, replica: int = 0, extra_env: dict[str, str] | None = None,
              extra_args: tuple[str, ...] = (), extra_ports: tuple[int, ...] = (), **run_options) -> Container:
        name = f"{RUN_ID}-{key}-{replica}"
        svc = self.compose["services"][service]
        started = time.monotonic()
        podman(*self.run_args(service, name, extra_env or {}, extra_ports, **run_options), *svc["command"], *extra_args)
        ports = {}
        for line in podman("port", name).stdout.splitlines():  # "50051/tcp -> 127.0.0.1:40123"
            inner, _, outer = line.partition(" -> ")
            ports[int(inner.split("/")[0])] = int(outer.rsplit(":", 1)[1])
        container = Container(name, service, ports)
        self.containers[key] = container
        self.wait_healthy(container)
        _report(f"start_to_healthy_s.{key}", round(time.monotonic() - started, 1))
        return container

    def wait_healthy(self, container: Container, timeout_s: float = 120) -> float:
        """Run the image's HEALTHCHECK until healthy; seconds it took."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            state = podman("inspect", container.name, "--format", "{{.State.Status}}").stdout.strip()
            if state != "running":
                raise AssertionError(f"{container.name} is {state}:\n{self.logs(container)}")
            if podman("healthcheck", "run", container.name, check=False).returncode == 0:
                return time.monotonic() - start
            time.sleep(0.5)
        raise AssertionError(f"{container.name} not healthy after {timeout_s}s:\n{self.logs(container)}")

    def logs(self, container: Container) -> str:
        out = podman("logs", "--tail", "60", container.name, check=False)
        return out.stdout + out.stderr

    def teardown(self) -> None:
        names = podman("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}", check=False).stdout.split()
        if names:
            podman("rm", "-f", "-t", "5", *names, check=False, timeout=120)
        podman("network", "rm", "-f", self.network, check=False)
        vols = podman("volume", "ls", "--filter", f"label={LABEL}", "--format", "{{.Name}}", check=False).stdout.split()
        if vols:
            podman("volume", "rm", "-f", *vols, check=False)


def _report(key: str, value: object) -> None:
    MEASURED[key] = value
    print(f"[deploy] {key}: {value}")
    path = os.environ.get("COHORT_DEPLOY_REPORT")
    if path:
        Path(path).write_text(json.dumps(MEASURED, indent=2))


def _image_mb(image: str) -> float:
    return round(int(podman("image", "inspect", image, "--format", "{{.Size}}").stdout) / 1e6, 1)


def _build(*targets: str) -> None:
    env = {**os.environ, "BASE_IMAGE": "local", "TAG": TAG}
    for target in targets:
        start = time.monotonic()
        out = subprocess.run([str(DEPLOY / "build.sh"), target], env=env, capture_output=True, text=True, timeout=1800)
        assert out.returncode == 0, f"build of {target} failed:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
        _report(f"build_s.{target}", round(time.monotonic() - start, 1))
        _report(f"image_mb.{target}", _image_mb(f"localhost/cohort-{target}:{TAG}"))


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def engine() -> None:
    """Install and configure podman (idempotent), and build the offline base image."""
    if os.geteuid() != 0 and not shutil.which("podman"):
        pytest.fail("container tests need root (to install rootful podman) or podman already set up")
    subprocess.run([str(DEPLOY / "ci-setup-podman.sh")], check=True, capture_output=True, timeout=900)
    existed = podman("image", "exists", "localhost/cohort-base:bookworm", check=False).returncode == 0
    start = time.monotonic()
    subprocess.run([str(DEPLOY / "build-base.sh")], check=True, capture_output=True, timeout=1200)
    _report("build_s.base" + (" (cached)" if existed else ""), round(time.monotonic() - start, 1))
    _report("image_mb.base", _image_mb("localhost/cohort-base:bookworm"))


@pytest.fixture(scope="module")
def images(engine) -> None:
    _build("verifier", "sandbox")


@pytest.fixture(scope="module")
def canary() -> str:
    return f"canary-{secrets.token_hex(8)}"


@pytest.fixture(scope="module")
def stack(images, canary, tmp_path_factory) -> Iterator[Stack]:
    """The compose services, plus a second math replica and a second sandbox ("sandbox-tight") run
    with the smallest set of privileges bubblewrap needs, behind its own code verifier."""
    profile = tmp_path_factory.mktemp("seccomp") / "sandbox.json"
    subprocess.run([sys.executable, str(DEPLOY / "seccomp.py"), str(profile)], check=True)
    tight = ["no-new-privileges", "unmask=/proc/*", f"seccomp={profile}"]
    s = Stack()
    try:
        s.create_network()
        metrics = {"extra_args": ("--metrics-port", str(METRICS_PORT)), "extra_ports": (METRICS_PORT,)}
        # The sandbox service's environment holds a canary that no sandboxed program may read.
        # (The sandbox is not published in compose; the test publishes it on 127.0.0.1 to check its health.)
        s.start("sandbox", "sandbox", extra_env={"COHORT_TEST_CANARY": canary}, extra_ports=(GRPC_PORT,))
        s.start("sandbox-tight", "sandbox", extra_env={"COHORT_TEST_CANARY": canary}, extra_ports=(GRPC_PORT,),
                alias="sandbox-tight", security_opt=tight)
        s.start("math", "math", 0, **metrics)
        s.start("math-2", "math", 1, **metrics)
        s.start("format", "format")
        s.start("code", "code")
        s.start("code-tight", "code", extra_env={"COHORT_SANDBOX_ENDPOINT": f"sandbox-tight:{GRPC_PORT}"},
                alias="code-tight")
        yield s
    finally:
        s.teardown()
        left = _leftovers()
        assert not left, f"left behind: {left}"


# ------------------------------------------------------------------------------ tests
def test_images_run_non_root_without_torch(images):
    for target in ("verifier", "sandbox"):
        out = podman("run", "--rm", "--entrypoint", "python3", f"localhost/cohort-{target}:{TAG}", "-c",
                     "import os, importlib.util as u; print(os.getuid(), u.find_spec('torch') is None)")
        assert out.stdout.split() == ["10001", "True"], out.stdout
        health = podman("image", "inspect", f"localhost/cohort-{target}:{TAG}", "--format", "{{json .Config.Healthcheck}}")
        assert "cohort-healthcheck" in health.stdout


def test_grpc_health_of_every_service(stack):
    from cohort.rpc.launch import health_status

    for key in stack.containers:
        assert health_status(stack[key].endpoint, "", 5) == "SERVING", key
    for key, name in (("math", "math"), ("math-2", "math"), ("format", "format"), ("code", "code"),
                      ("code-tight", "code")):
        assert health_status(stack[key].endpoint, name, 5) == "SERVING", key  # what the k8s readiness probe asks
    # The image's HEALTHCHECK (what podman/compose use) reports healthy too.
    for container in stack.containers.values():
        assert podman("healthcheck", "run", container.name, check=False).returncode == 0, container.name


HOSTILE = '''
import os, socket

def escapes():
    """Every way out this program tries; an empty list means it was contained."""
    found = []
    try:  # 1. the network: a listener on the container network's gateway (the host)
        socket.create_connection(("{gateway}", {port}), timeout=3).close()
        found.append("network")
    except OSError:
        pass
    try:  # 2. the code verifier's container by its service name
        socket.create_connection(("code", 50051), timeout=3).close()
        found.append("network:code")
    except OSError:
        pass
    for pid in os.listdir("/proc"):  # 3. the service's processes and their environment
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{{pid}}/environ", "rb") as f:
                if b"{canary}" in f.read():
                    found.append("environ")
        except OSError:
            pass
        try:
            with open(f"/proc/{{pid}}/cmdline", "rb") as f:
                if b"serve\\x00sandbox" in f.read():
                    found.append("service-process")
        except OSError:
            pass
    if "{canary}" in str(dict(os.environ)):
        found.append("own-environ")
    for path in ("/opt/venv/lib/python3.11/site-packages/sandbox/policy.py", "/home/cohort"):
        if os.path.exists(path):  # 4. the service's files
            found.append("file:" + path)
    try:  # 5. a file the test looks for in the container's /tmp afterwards
        with open("/tmp/escaped-{canary}", "w") as f:
            f.write("x")
    except OSError:
        pass
    return sorted(set(found))
'''


def _code_record(group_id: str, completions: list[str], asserts: list[str]) -> dict:
    return {"group_id": group_id, "prompt": "write the function", "verifiers": ["code"],
            "code_tests": {"asserts": asserts}, "rollouts": [f"```python\n{c}\n```" for c in completions]}


def _records(gateway: str, port: int, canary: str) -> list[dict]:
    hostile = HOSTILE.format(gateway=gateway, port=port, canary=canary)
    return [
        {"group_id": "m1", "prompt": "What is 6*7?", "answer": "42", "verifiers": ["math"],
         "rollouts": ["The answer is \\boxed{42}.", "\\boxed{41}", "I think it is \\boxed{\\frac{84}{2}}", "no idea"]},
        {"group_id": "m2", "prompt": "Simplify 1/2 + 1/3.", "answer": "\\frac{5}{6}", "verifiers": ["math"],
         "rollouts": ["\\boxed{5/6}", "\\boxed{\\frac{2}{5}}"]},
        {"group_id": "f1", "prompt": "2+2?", "answer": "4", "verifiers": ["format"],
         "rollouts": ["<think>2+2 is 4</think><answer>4</answer>", "4"]},
        _code_record("c1", ["def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b"],
                     ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]),
        # Contained <=> escapes() finds nothing <=> the tests pass: CORRECT means every attempt failed.
        _code_record("hostile", [hostile], ["assert escapes() == []"]),
        _code_record("bombs", [
            "import os\nwhile True:\n    os.fork()",                           # fork bomb
            "x = []\nwhile True:\n    x.append(bytearray(1 << 24))",         # memory hog
            "while True:\n    pass",                                          # infinite loop
            "import sys\nsys.stdout.write('A' * (1 << 30))",                  # output flood
        ], ["assert True"]),
    ]


class Listener:
    """A TCP listener on the container network's gateway, counting connections (escape detector)."""

    def __init__(self, host: str) -> None:
        self.sock = socket.create_server((host, 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def _cohort_verify(path: Path, endpoints: list[str], *extra: str, timeout: float = 300) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "cohort.cli", "verify", str(path), "--json", *extra]
    for e in endpoints:
        cmd += ["-e", e]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _rows(proc: subprocess.Popen, timeout: float = 300) -> dict[tuple[str, int], dict]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"cohort verify exited {proc.returncode}:\n{err[-4000:]}"
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {(r["group_id"], r["index"]): r for r in rows}


@pytest.mark.parametrize("code", ["code", "code-tight"])
def test_cohort_verify_scores_math_format_and_code_through_the_sandbox_container(stack, canary, tmp_path, code):
    """`code`: the sandbox as compose runs it; `code-tight`: the sandbox with only unmask=/proc/* and
    the engine's default seccomp profile plus sethostname (deploy/seccomp.py)."""
    s = stack
    sandbox = stack["sandbox" if code == "code" else "sandbox-tight"]
    listener = Listener(s.gateway)
    try:
        records = _records(s.gateway, listener.port, canary)
        path = tmp_path / "batch.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        start = time.monotonic()
        rows = _rows(_cohort_verify(path, [f"math={stack['math'].endpoint}", f"math={stack['math-2'].endpoint}",
                                          f"format={stack['format'].endpoint}", f"code={stack[code].endpoint}"]))
        _report(f"verify_batch_s.{code}", round(time.monotonic() - start, 2))
    finally:
        listener.close()

    assert len(rows) == sum(len(r["rollouts"]) for r in records)
    for row in rows.values():  # nothing here is an infrastructure failure
        assert row["status"] == "ROLLOUT_STATUS_OK", row

    def verdict(gid: str, idx: int, name: str) -> str:
        return rows[(gid, idx)]["verifiers"][name]["verdict"]

    assert [verdict("m1", i, "math") for i in range(3)] == ["correct", "incorrect", "correct"]
    assert verdict("m1", 3, "math") in {"no_answer", "incorrect"} and rows[("m1", 3)]["reward"] == 0.0
    assert [verdict("m2", i, "math") for i in range(2)] == ["correct", "incorrect"]
    assert rows[("f1", 0)]["reward"] > rows[("f1", 1)]["reward"]
    assert [verdict("c1", i, "code") for i in range(2)] == ["correct", "incorrect"]

    # The hostile program ran (its test executed) and found no way out ...
    assert verdict("hostile", 0, "code") == "correct", rows[("hostile", 0)]
    # ... and the outside agrees: no connection reached the host, nothing written to the container.
    assert listener.connections == 0
    probe = podman("exec", sandbox.name, "sh", "-c", f"ls /tmp/escaped-{canary} 2>&1 || true").stdout
    assert "No such file" in probe
    # Resource bombs are the policy's failure (status OK, reward 0), not the sandbox's.
    for i in range(4):
        assert rows[("bombs", i)]["reward"] == 0.0
        assert verdict("bombs", i, "code") in {"resource_limit_exceeded", "runtime_error", "incorrect"}, rows[("bombs", i)]
    # The sandbox survived all of it.
    assert podman("healthcheck", "run", sandbox.name, check=False).returncode == 0


def test_hostile_probes_do_detect_an_escape_outside_bubblewrap(stack, canary):
    """Control: the same probes run in the sandbox *container* but outside bwrap do find a way out,
    so the empty result above is containment by the sandbox, not blind probes."""
    s = stack
    listener = Listener(s.gateway)
    try:
        script = HOSTILE.format(gateway=s.gateway, port=listener.port, canary=canary) + "\nprint(escapes())\n"
        out = podman("exec", "-i", stack["sandbox"].name, "python3", "-", input=script).stdout
    finally:
        listener.close()
    found = eval(out.strip(), {})  # a list literal of strings printed by the script
    assert {"network", "network:code", "environ", "service-process"} <= set(found), found
    assert listener.connections >= 1


def _requests_served(container: Container) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{container.ports[METRICS_PORT]}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("cohort_verifier_requests_total{") and 'method="BatchVerifyGroups"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture(scope="module")
def trainer_image(engine) -> None:
    _build("trainer")


def test_trainer_container_trains_against_the_verifier_containers(trainer_image, stack):
    """The compose trainer service (its config names `math:50051`) runs GRPO steps scored by the containers."""
    before = sum(_requests_served(stack[k]) for k in ("math", "math-2"))
    cmd = stack.compose["services"]["trainer"]["command"]
    start = time.monotonic()
    out = podman(*stack.run_args("trainer", f"{RUN_ID}-trainer-0", {}, (), detach=False), *cmd,
                 "run.max_steps=2", "run.output_dir=/runs/test", check=False, timeout=900)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    _report("trainer_container_2_steps_s", round(time.monotonic() - start, 1))
    assert sum(_requests_served(stack[k]) for k in ("math", "math-2")) >= before + 2  # one scoring call per step


def test_killing_a_verifier_replica_during_scoring_loses_nothing(stack, tmp_path):
    """Two math replicas; SIGKILL one while `cohort verify` is scoring: every rollout still scored."""
    a, b = stack["math"], stack["math-2"]
    n_groups = 3000
    records = [{"group_id": f"g{i}", "answer": str(i), "verifiers": ["math"],
                "rollouts": [f"\\boxed{{{i}}}", f"\\boxed{{{i + 1}}}", f"\\boxed{{\\frac{{{2 * i}}}{{2}}}}"]}
               for i in range(n_groups)]
    path = tmp_path / "failover.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    base_a, base_b = _requests_served(a), _requests_served(b)

    proc = _cohort_verify(path, [f"math={a.endpoint}", f"math={b.endpoint}"], "--batch-size", "10", "--timeout", "30")
    deadline = time.monotonic() + 60
    while _requests_served(a) < base_a + 3:  # replica A is taking part in this run
        assert proc.poll() is None, "scoring finished before replica A could be killed: make the batch bigger"
        assert time.monotonic() < deadline, "replica A never received a call"
        time.sleep(0.05)
    served_a_before_kill = _requests_served(a) - base_a
    podman("kill", "--signal", "KILL", a.name)
    killed_during_run = proc.poll() is None
    rows = _rows(proc)
    _report("failover.calls_on_killed_replica", served_a_before_kill)
    _report("failover.calls_on_survivor", _requests_served(b) - base_b)

    assert killed_during_run, "the replica was killed after scoring had finished"
    assert podman("inspect", a.name, "--format", "{{.State.Status}}").stdout.strip() != "running"
    assert len(rows) == 3 * n_groups
    for i in range(n_groups):
        got = [rows[(f"g{i}", k)] for k in range(3)]
        assert [r["status"] for r in got] == ["ROLLOUT_STATUS_OK"] * 3, got
        assert [r["verifiers"]["math"]["verdict"] for r in got] == ["correct", "incorrect", "correct"], got
    assert _requests_served(b) - base_b > 0


