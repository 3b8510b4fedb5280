"""The learner's side of the pipeline's job (``trainer.wire``) against a real second process over gloo on loopback."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import traceback

import torch

from cohort.trainer import wire

# rank 1 of a two-process job: joins, says so, and receives one weight version only when told to (a line on stdin)
PEER = """
import os, sys, torch
from cohort.trainer import wire
links = wire.Links.join(sys.argv[1], 1, 2)
print("joined", flush=True)
sys.stdin.readline()
version, flat = wire.receive_weights(links.weights, torch.float32)
print(version, flat.numel(), flush=True)
os._exit(0)  # no interpreter teardown: gloo's threads at exit are not this test's subject
"""


def retiring_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "pipeline-retire"]


def test_a_job_with_a_broadcast_in_flight_is_let_go_without_waiting_for_it(tmp_path, subprocesses, deadline):
    """``Links.retire`` returns at once while a weight broadcast is still on the wire (a peer that does not receive:
    alive, or dead where gloo misses it), and the caller dropping its last reference does not wait either: a gloo
    group's destructor joins the thread running the broadcast, which hung the learner in C++ before (CI ran out
    of time in tests/trainer/test_pipeline.py's restart test). Once the peer receives, the broadcast ends and
    the retiring thread with it."""
    init = f"file://{tmp_path / 'rendezvous'}"
    peer = subprocesses.popen([sys.executable, "-c", PEER, init], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    joined: dict[str, wire.Links] = {}
    joining = threading.Thread(target=lambda: joined.setdefault("links", wire.Links.join(init, wire.LEARNER, 2)),
                               daemon=True)
    joining.start()
    joining.join(deadline(120))
    assert "links" in joined, "the job did not form"
    assert peer.stdout.readline().strip() == "joined"

    flat = torch.arange(8 * 2**20, dtype=torch.float32)  # 32 MiB in two slices: more than a socket holds
    joined["works"] = wire.broadcast_weights(7, flat, joined["links"].weights)
    time.sleep(0.5)
    assert not joined["works"][-1].is_completed()  # on the wire: the peer has not received

    def let_go() -> None:
        links, works = joined.pop("links"), joined.pop("works")
        links.retire(works)
        del links, works  # the last references outside the retiring thread

    earlier = set(retiring_threads())  # an earlier test's (the restart tests leave one blocked on a killed worker)
    letting_go = threading.Thread(target=let_go, daemon=True)
    started = time.monotonic()
    letting_go.start()
    letting_go.join(10)
    assert not letting_go.is_alive(), "letting go of the job waited for the broadcast in flight"
    assert time.monotonic() - started < 10
    retiring = [t for t in retiring_threads() if t not in earlier]
    assert len(retiring) == 1 and retiring[0].is_alive()  # it holds the groups while the broadcast is on

    peer.stdin.write("\n")
    peer.stdin.flush()
    assert peer.stdout.readline().split() == ["7", str(flat.numel())]
    assert peer.wait(deadline(60)) == 0
    (thread,) = retiring
    thread.join(deadline(60))
    where = "".join(traceback.format_stack(sys._current_frames().get(thread.ident))) if thread.is_alive() else ""
    assert not thread.is_alive(), f"the retiring thread did not end once the broadcast was received:\n{where}"
