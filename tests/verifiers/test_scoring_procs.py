"""``cohort serve --scoring-procs N``: GIL-bound verifiers scored in killable worker processes.

Real servers in subprocesses on loopback; the test is the client. The replies must be the ones the
threaded path gives, bad requests keep their status codes, and a worker that dies or runs away is
killed and replaced without a single rollout scored as a wrong answer.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import grpc
import pytest
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort.rpc.launch import ServiceProcess, health_status

SHAPES = [
    "<think>{r}</think><answer>{a}</answer>",
    "<think>{r}</think>\n<answer>{a}</answer> trailing",
    "{r} so {a}",
    "<think>{r}</think><answer>{a}</answer><answer>{a}1</answer>",
    "<think>{r}</think> \\boxed{{{a}}}",
    "<think><think>{r}</think></think><answer></answer>",
]


def batch(n_groups: int, verifier: str = "format", seed: int = 0, **options: str) -> pb.BatchVerifyGroupsRequest:
    rng = random.Random(seed)
    requests = []
    for g in range(n_groups):
        rollouts = [
            pb.Rollout(index=i, completion=rng.choice(SHAPES).format(r="carry the one " * rng.randint(1, 9), a=rng.randint(0, 99)))
            for i in range(8)
        ]
        requests.append(pb.VerifyGroupRequest(group_id=f"g{g}", verifier=verifier, rollouts=rollouts, options=options))
    return pb.BatchVerifyGroupsRequest(requests=requests)


def without_durations(resp: pb.BatchVerifyGroupsResponse) -> pb.BatchVerifyGroupsResponse:
    out = pb.BatchVerifyGroupsResponse()
    out.CopyFrom(resp)
    for group in out.responses:
        group.ClearField("verify_duration")
        for r in group.results:
            r.ClearField("verify_duration")
    return out


def scoring_pids(server_pid: int) -> list[int]:
    """The server's spawned scoring processes (children running multiprocessing's spawn_main)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == server_pid and b"spawn_main" in cmdline:
            pids.append(int(entry.name))
    return sorted(pids)


def stub_for(sp: ServiceProcess):
    channel = grpc.insecure_channel(sp.endpoint)
    return channel, pb_grpc.VerifierServiceStub(channel)


@pytest.fixture(scope="module")
def procs_server():
    with ServiceProcess(["format"], extra_args=["--scoring-procs", "2", "--metrics-port", "0"]) as sp:
        yield sp


def test_replies_equal_the_threaded_servers(procs_server):
    request = batch(37, seed=3)
    with ServiceProcess(["format"]) as threaded:
        ch_t, threaded_stub = stub_for(threaded)
        ch_p, procs_stub = stub_for(procs_server)
        with ch_t, ch_p:
            want = without_durations(threaded_stub.BatchVerifyGroups(request, timeout=30))
            got = procs_stub.BatchVerifyGroups(request, timeout=30)
    assert len(scoring_pids(procs_server.proc.pid)) == 2
    assert [g.group_id for g in got.responses] == [f"g{i}" for i in range(37)]
    assert without_durations(got) == want
    rewards = {r.reward for g in got.responses for r in g.results}
    assert {0.0, 1.0} <= rewards  # a real mix of verdicts, not one constant
    assert all(r.status == pb.ROLLOUT_STATUS_OK for g in got.responses for r in g.results)
    assert all(g.verify_duration.ToNanoseconds() > 0 for g in got.responses)


def test_an_old_client_asking_for_columns_gets_rows(procs_server):
    """The columnar layout was removed (its field is reserved): a request that still sets it is answered
    with rows, the same as the threaded server's."""
    request = batch(37, seed=5).SerializeToString() + b"\x10\x02"  # result_layout = RESULT_LAYOUT_COLUMNS, as old clients sent
    with ServiceProcess(["format"]) as threaded:
        ch_t, threaded_stub = stub_for(threaded)
        ch_p, procs_stub = stub_for(procs_server)
        with ch_t, ch_p:
            raw = {name: ch.unary_unary("/grpo.verifier.v1.VerifierService/BatchVerifyGroups") for name, ch in [("threads", ch_t), ("procs", ch_p)]}
            got = {name: pb.BatchVerifyGroupsResponse.FromString(call(request, timeout=30)) for name, call in raw.items()}
    for name, reply in got.items():
        assert [len(g.results) for g in reply.responses] == [8] * 37, name
        assert [g.group_id for g in reply.responses] == [f"g{i}" for i in range(37)], name
    assert without_durations(got["procs"]) == without_durations(got["threads"])


def test_bad_requests_keep_their_codes(procs_server):
    channel, stub = stub_for(procs_server)
    with channel:
        dup = batch(4)
        dup.requests[2].rollouts[1].index = 0
        with pytest.raises(grpc.RpcError) as err:
            stub.BatchVerifyGroups(dup, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "duplicate rollout index 0" in err.value.details() and "'g2'" in err.value.details()
        bad_option = batch(3, mode="loose")
        with pytest.raises(grpc.RpcError) as err:
            stub.BatchVerifyGroups(bad_option, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "mode" in err.value.details()
        assert health_status(procs_server.endpoint) == "SERVING"
        ok = stub.BatchVerifyGroups(batch(5), timeout=10)
        assert len(ok.responses) == 5 and all(len(g.results) == 8 for g in ok.responses)


def test_metrics_count_rollouts_scored_in_the_processes(procs_server):
    import urllib.request

    channel, stub = stub_for(procs_server)
    with channel:
        stub.BatchVerifyGroups(batch(6, seed=9), timeout=10)
    text = urllib.request.urlopen(f"http://127.0.0.1:{procs_server.metrics_port}/metrics", timeout=5).read().decode()
    counted = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("cohort_verifier_rollouts_total{") and 'verifier="format"' in line and 'status="ok"' in line
    )
    assert counted >= 48


def test_worker_killed_mid_batch_is_an_error_never_a_zero(testplugin):
    from cohort.verifiers import convert
    from cohort.verifiers.base import RolloutStatus

    with ServiceProcess(["spinner"], extra_args=["--scoring-procs", "2"]) as sp:
        channel, stub = stub_for(sp)
        with channel:
            before = scoring_pids(sp.proc.pid)
            assert len(before) == 2
            request = batch(4, verifier="spinner", spin_s="1.5")  # two chunks of two groups, ~3 s each
            killer = threading.Timer(1.0, os.kill, (before[0], signal.SIGKILL))
            killer.start()
            resp = stub.BatchVerifyGroups(request, timeout=30)
            killer.join()
            groups = convert.batch_result_from_pb(resp)
            statuses = [r.status for g in groups for r in g.results]
            assert len(statuses) == 32
            assert statuses.count(RolloutStatus.VERIFIER_ERROR) == 16  # the dead worker's chunk
            assert statuses.count(RolloutStatus.OK) == 16  # the other chunk, unaffected
            for g in groups:
                for r, rollout in zip(g.results, request.requests[int(g.group_id[1:])].rollouts, strict=True):
                    assert r.index == rollout.index
                    if r.status is RolloutStatus.OK:
                        assert r.reward == len(rollout.completion) % 2
                    else:
                        assert "died" in r.detail
            # replaced: two live workers again, and the next batch is scored in full
            quick = stub.BatchVerifyGroups(batch(4, verifier="spinner"), timeout=60)
            assert all(r.status == pb.ROLLOUT_STATUS_OK for g in quick.responses for r in g.results)
            after = scoring_pids(sp.proc.pid)
            assert len(after) == 2 and before[0] not in after


def timed_out(call) -> None:
    """A call whose verifier runs past the deadline ends in one of two correct ways, by a race between the two
    clocks: the client's deadline fires first (DEADLINE_EXCEEDED), or the server's, which kills the scoring
    process and answers every rollout VERIFIER_TIMEOUT (masked, never scored) just before the client's."""
    try:
        responses = call()
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED, err
        return
    statuses = {r.status for g in responses for r in g.results}
    assert statuses == {pb.ROLLOUT_STATUS_VERIFIER_TIMEOUT}, statuses


def test_runaway_verifier_is_killed_at_the_deadline(testplugin):
    with ServiceProcess(["spinner"], extra_args=["--scoring-procs", "1"]) as sp:
        channel, stub = stub_for(sp)
        with channel:
            (first,) = scoring_pids(sp.proc.pid)
            timed_out(lambda: stub.BatchVerifyGroups(batch(1, verifier="spinner", spin_s="600"), timeout=1.0).responses)
            # the only worker spun for 600 s; it was killed at the deadline, so this is answered at once
            t0 = time.monotonic()
            resp = stub.BatchVerifyGroups(batch(2, verifier="spinner"), timeout=60)
            assert time.monotonic() - t0 < 30
            assert all(r.status == pb.ROLLOUT_STATUS_OK for g in resp.responses for r in g.results)
            assert first not in scoring_pids(sp.proc.pid)
            assert health_status(sp.endpoint) == "SERVING"
            # VerifyGroup takes the same path: a runaway single group is killed at its deadline too
            (second,) = scoring_pids(sp.proc.pid)
            timed_out(lambda: [stub.VerifyGroup(batch(1, verifier="spinner", spin_s="600").requests[0], timeout=1.0)])
            one = stub.VerifyGroup(batch(1, verifier="spinner").requests[0], timeout=60)
            assert [r.index for r in one.results] == list(range(8)) and one.group_id == "g0"
            assert all(r.status == pb.ROLLOUT_STATUS_OK for r in one.results)
            assert second not in scoring_pids(sp.proc.pid)


def test_non_gil_bound_verifiers_stay_on_threads(testplugin):
    """`exact` does not declare max_concurrency = 1: it is scored in threads, next to a GIL-bound one."""
    with ServiceProcess(["exact", "format"], extra_args=["--scoring-procs", "1"]) as sp:
        channel, stub = stub_for(sp)
        with channel:
            assert len(scoring_pids(sp.proc.pid)) == 1
            request = batch(2)
            request.requests.append(
                pb.VerifyGroupRequest(group_id="e", verifier="exact", reference=pb.Reference(answer="42"),
                                      rollouts=[pb.Rollout(index=0, completion="42"), pb.Rollout(index=1, completion="41")])
            )
            resp = stub.BatchVerifyGroups(request, timeout=30)
            assert [r.reward for r in resp.responses[2].results] == [1.0, 0.0]
            assert [g.group_id for g in resp.responses] == ["g0", "g1", "e"]


def test_scoring_procs_flag_rejects_negative():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "cohort.cli", "serve", "format", "--scoring-procs", "-1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "scoring-procs" in proc.stderr


def test_conformance_kit_passes_with_scoring_processes():
    """Every rule of the kit (determinism, order, status codes, deadlines, SIGTERM drain...) holds."""
    import sys

    from cohort.conformance import RULES, load_cases, run_kit

    cases = load_cases(Path(__file__).resolve().parents[1] / "conformance" / "cases" / "format.jsonl", "format")
    results = run_kit("127.0.0.1:0", "format", cases,
                      server_cmd=f"{sys.executable} -m cohort.cli serve format --scoring-procs 2 --port {{port}}")
    assert {r.rule: r.status for r in results} == {rule: "pass" for rule in RULES}, [r for r in results if r.status != "pass"]


def test_domain_objects_cross_the_pipe_unchanged():
    """The domain objects pickle with every field intact (a plugin's own process pool may pickle them)."""
    import pickle

    from cohort.verifiers.base import (CodeTests, GroupRequest, GroupResult, Reference, Rollout, RolloutResult, RolloutStatus,
                                       StepReward, Verdict)

    groups = [GroupRequest("math", (Rollout(3, "x = 4", True), Rollout(1, "")), Reference(answer="4"), "q1", "2+2?", 2.5, {"mode": "soft"}),
              GroupRequest("code", (Rollout(0, "def f(): pass"),), Reference(code_tests=CodeTests("asserts", asserts=("assert f() is None",))))]
    results = [GroupResult("q1", "math", "1.2", (
        RolloutResult(0, RolloutStatus.OK, Verdict.PARTIAL, 0.5, {"a": 0.5}, "half", 0.25, ("multiple_answers",), (StepReward(2, 1.0),)),
        RolloutResult.unusable(1, RolloutStatus.VERIFIER_TIMEOUT, "slow")), 0.75)]
    for value in (groups, results):
        back = pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        assert back == value and back is not value
    assert pickle.loads(pickle.dumps(results))[0].results[0].steps == (StepReward(2, 1.0),)
