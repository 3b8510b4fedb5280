"""Stateful `python` sessions (issue 49): one sandboxed interpreter per rollout, kept across its turns.

Through the learner's client and `cohort serve sandbox` (``COHORT_TOOL_SESSIONS=1``, real gRPC, the real
sandbox): a variable set in turn 1 is read in turn 3 and never seen by another session; EndSessions tears a
session down (its interpreter is gone from the machine); 256 sessions started at once queue and complete;
the hostile programs of ``test_tool_hostile.py`` run as session calls stay contained. In process (the same
sandbox, :class:`~cohort.sandbox.tool.PythonTool` with small bounds): the memory cap, idle expiry, the call
count and lifetime, eviction of the least recently used idle session, a loop that ends its session, and
a burst with no free place answered ``busy``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
from pathlib import Path

import pytest

from cohort.rpc.launch import ServiceProcess
from cohort.sandbox.session import SessionLimits, Sessions
from cohort.sandbox.tool import PythonTool
from cohort.tools.calls import render
from cohort.tools.client import Call, ToolClient

from .conftest import leftover_sandbox_processes, marker_files, port_listening

HERE = Path(__file__).resolve().parent
MANY = 256
WALL_S = 2.0


def _hostile_programs():
    spec = importlib.util.spec_from_file_location("tool_sessions_hostile", HERE / "test_tool_hostile.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.PROGRAMS


PROGRAMS = _hostile_programs()


def python(code: str, session: str) -> Call:
    return Call("python", json.dumps({"code": code}), session)


@pytest.fixture(scope="module")
def server(secret):
    env = {"COHORT_SANDBOX_POOL_SIZE": "2", "COHORT_TOOL_SESSIONS": "1", "COHORT_TOOL_MAX_SESSIONS": str(MANY + 8),
           "COHORT_TOOL_WALL_S": str(WALL_S), "COHORT_SANDBOX_TEST_SECRET": secret}
    with ServiceProcess(["sandbox"], env=env) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server):
    c = ToolClient([[server.endpoint]], timeout_s=300)
    listed = c.handshake()
    assert listed["python"].stateful and "persist" in listed["python"].description
    yield c
    c.close()


def test_a_variable_set_in_turn_1_is_read_in_turn_3_and_no_other_session_sees_it(client) -> None:
    turns = [[python("x = 6 * 7\nimport math", "a"), python("print('b here')", "b")],
             [python("y = x + 1", "a"), python("x = 'b has its own x'", "b")],
             [python("print(x, y, math.sqrt(16))", "a"), python("print(x)\nprint(y)", "b"),
              python("print(x)", "c")]]
    answers = [client.execute(batch) for batch in turns]
    assert all(r.ok for batch in answers for r in batch)
    assert answers[0][0].output == "" and answers[1][0].output == ""
    assert answers[2][0].output == "42 43 4.0\n" and answers[2][0].error_kind == ""
    b = answers[2][1]  # b's own x, never a's; a's y does not exist in b
    assert b.error_kind == "runtime_error" and b.output.startswith("b has its own x\n") and "NameError" in b.output
    c = answers[2][2]
    assert c.error_kind == "runtime_error" and "name 'x' is not defined" in c.output
    assert client.end_sessions(["a", "b", "c"]) == 3


def test_the_end_of_a_rollout_tears_its_session_down(client) -> None:
    before = len(leftover_sandbox_processes())
    client.execute([python("x = 1", f"end{i}") for i in range(3)])
    assert len(leftover_sandbox_processes()) == before + 3  # one live interpreter per session
    assert client.end_sessions([f"end{i}" for i in range(3)] + ["never-started"]) == 3
    deadline = time.monotonic() + 10
    while len(leftover_sandbox_processes()) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(leftover_sandbox_processes()) == before  # the interpreters are gone from the machine
    [again] = client.execute([python("print(x)", "end0")])
    assert again.ok and "NameError" in again.output  # a fresh session: nothing of the old one
    assert client.end_sessions(["end0"]) == 1


def test_256_sessions_started_at_once_queue_and_complete(client) -> None:
    start = time.monotonic()
    first = client.execute([python(f"x = {i}\nprint('ready')", f"many{i}") for i in range(MANY)])
    started = time.monotonic() - start
    assert [r.error_kind for r in first] == [""] * MANY, [r for r in first if r.error_kind][:3]  # none busy
    assert all(r.ok and r.output == "ready\n" for r in first)
    second = client.execute([python("print(x)", f"many{i}") for i in range(MANY)])
    assert [r.output for r in second] == [f"{i}\n" for i in range(MANY)]
    assert client.end_sessions([f"many{i}" for i in range(MANY)]) == MANY
    print(f"{MANY} sessions started in {started:.1f} s")


@pytest.fixture(scope="module")
def hostile(client):
    """Every hostile program as a session call (one session each) next to a bystander session that holds a
    value; then each session's next turn and the bystander's; then every session ended."""
    ids = [f"hostile{i}" for i in range(len(PROGRAMS))]
    [set_up] = client.execute([python("kept = 'bystander value'", "bystander")])
    assert set_up.ok and set_up.error_kind == ""
    results = client.execute([python(code, sid) for sid, (_, code, _, _) in zip(ids, PROGRAMS)])
    next_turn = client.execute([python("print(6 * 7)", sid) for sid in ids])
    [bystander] = client.execute([python("print(kept)", "bystander")])
    client.end_sessions([*ids, "bystander"])
    return dict(zip((p[0] for p in PROGRAMS), zip(results, next_turn))), bystander


def test_the_suite_is_the_hostile_suite() -> None:
    assert len(PROGRAMS) >= 50


@pytest.mark.parametrize("prog", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_hostile_program_in_a_session_is_contained(prog, hostile, secret) -> None:
    name, _, _, must_not_print = prog
    answered, bystander = hostile
    result, next_turn = answered[name]
    assert result.ok, result  # the policy's own program: scored, never masked
    assert secret not in result.output and secret not in next_turn.output
    if must_not_print:  # in what the program printed (the server's own note on an ended session aside)
        assert must_not_print not in result.output.split("\n[the session ended")[0], result
    assert next_turn.ok, next_turn  # the rollout's next turn is answered (its session may have been reset)
    assert bystander.ok and bystander.output == "bystander value\n", bystander  # another session untouched
    assert render(result, "fenced").startswith("\n```output\n")


def test_nothing_of_the_hostile_sessions_is_left_on_the_host(hostile) -> None:
    deadline = time.monotonic() + 10
    while leftover_sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftover_sandbox_processes() == []
    assert marker_files() == []
    assert not port_listening(47123)


# ---- bounds, in process (the same sandbox and session code, small limits) ------------------------------

def tool_with(sandbox, **limits) -> PythonTool:
    return PythonTool(sandbox, slots=1, wall_s=WALL_S, sessions=SessionLimits(**limits))


def run(tool: PythonTool, code: str, session: str):
    return tool.run({"code": code}, session)


def test_a_sessions_memory_is_capped_and_it_survives_the_error(sandbox) -> None:
    tool = tool_with(sandbox, memory_bytes=128 << 20)
    try:
        assert run(tool, "x = 7", "m").error_kind == ""
        out = run(tool, "big = bytearray(512 << 20)", "m")
        assert out.error_kind == "memory_limit", out
        assert run(tool, "print(x)", "m").output == "7\n"  # a MemoryError is the call's: the state stays
        out = run(tool, "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))", "m")
        assert out.error_kind == "memory_limit", out
    finally:
        tool.sessions.close()


def test_an_idle_session_expires_and_its_sandbox_is_gone(sandbox) -> None:
    tool = tool_with(sandbox, idle_s=0.5)
    try:
        assert run(tool, "x = 1", "idle").error_kind == ""
        [session] = tool.sessions._live.values()
        time.sleep(2.0)
        assert len(tool.sessions) == 0 and session.slot.proc.poll() is not None  # reaped: the sandbox is dead
        out = run(tool, "print(x)", "idle")
        assert out.error_kind == "runtime_error" and "idle for 0.5 s" in out.output and "NameError" in out.output
    finally:
        tool.sessions.close()


def test_call_count_and_lifetime_bound_a_session(sandbox) -> None:
    tool = tool_with(sandbox, max_calls=2, lifetime_s=1.5)
    try:
        run(tool, "x = 1", "calls")
        assert run(tool, "print(x)", "calls").output == "1\n"
        out = run(tool, "print(x)", "calls")
        assert "made its 2 calls" in out.output and "NameError" in out.output
        run(tool, "y = 2", "life")
        time.sleep(2.0)
        out = run(tool, "print(y)", "life")
        assert "lifetime of 1.5 s" in out.output and "NameError" in out.output
    finally:
        tool.sessions.close()


def test_a_loop_ends_its_session_and_the_next_call_says_so(sandbox) -> None:
    tool = tool_with(sandbox)
    try:
        run(tool, "x = 1", "loop")
        out = run(tool, "while True: pass", "loop")
        assert out.error_kind == "time_limit" and "variables are gone" in out.output, out
        out = run(tool, "print(x)", "loop")
        assert "ran past its time limit" in out.output and "NameError" in out.output
    finally:
        tool.sessions.close()


def test_the_least_recently_used_idle_session_gives_its_place(sandbox) -> None:
    tool = tool_with(sandbox, max_live=2)
    try:
        for sid in ("a", "b", "c"):  # c takes a's place: a is the least recently used
            assert run(tool, f"v = {sid!r}", sid).error_kind == ""
        assert len(tool.sessions) == 2
        assert run(tool, "print(v)", "b").output == "b\n"
        out = run(tool, "print(v)", "a")
        assert "needed its place" in out.output and "NameError" in out.output
    finally:
        tool.sessions.close()


def test_no_free_place_before_the_deadline_is_a_timeout_not_a_failure(sandbox) -> None:
    sessions = Sessions(sandbox.options.config, SessionLimits(max_live=1))
    try:
        busy = threading.Thread(target=sessions.call, args=("long", "import time\ntime.sleep(1.5)", 5.0,
                                                            time.monotonic() + 10))
        busy.start()
        time.sleep(0.5)  # the one place is held by a running call
        with pytest.raises(TimeoutError, match="sessions are busy"):
            sessions.call("other", "print(1)", 5.0, time.monotonic() + 0.3)
        busy.join()
        result, _ = sessions.call("other", "print(1)", 5.0, time.monotonic() + 10)  # the place freed: it runs
        assert result.stdout == "1\n"
    finally:
        sessions.close()


def test_a_stateless_server_answers_end_sessions_at_once() -> None:
    with ServiceProcess(["calculator"]) as calc:
        client = ToolClient([[calc.endpoint]], timeout_s=30)
        try:
            assert not client.handshake()["calculator"].stateful
            assert client.end_sessions(["a", "b"]) == 0
        finally:
            client.close()
