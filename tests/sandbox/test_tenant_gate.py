"""The sandbox server's admission gate (sandbox/server.py TenantGate), on an event loop, no sandbox."""

from __future__ import annotations

import asyncio

import pytest

from cohort.sandbox.server import TenantGate


def test_a_tenant_runs_at_most_its_share_and_queues_a_bounded_number():
    async def run():
        gate = TenantGate(max_running=2, max_waiting=1)
        await gate.acquire("a")
        await gate.acquire("a")
        waiter = asyncio.ensure_future(gate.acquire("a"))  # third: waits, holding no place
        await asyncio.sleep(0.01)
        assert not waiter.done() and gate.full("a")  # 2 running + 1 waiting: a fourth is refused
        assert not gate.full("b") and not gate.full("")  # other tenants and untenanted calls are not affected
        await gate.acquire("b")
        gate.release("a")
        await asyncio.wait_for(waiter, 1)  # a place freed: the waiter runs
        assert gate.full("a") is False
        for tenant in ("a", "a", "b"):
            gate.release(tenant)
        assert not gate._users and not gate._slots  # nothing left behind per tenant

    asyncio.run(run())


def test_a_caller_that_gives_up_while_waiting_frees_its_place_in_the_queue():
    async def run():
        gate = TenantGate(max_running=1, max_waiting=1)
        await gate.acquire("a")
        waiter = asyncio.ensure_future(gate.acquire("a"))
        await asyncio.sleep(0.01)
        assert gate.full("a")
        waiter.cancel()  # the client's deadline passed while it waited
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not gate.full("a")
        gate.release("a")
        assert not gate._users

    asyncio.run(run())


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError):
        TenantGate(max_running=0, max_waiting=1)
