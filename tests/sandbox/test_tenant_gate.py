"""The servers' admission gate (rpc/gate.py FairGate: the sandbox's tenants, the tool path's sessions), on an
event loop, no sandbox."""

from __future__ import annotations

import asyncio

import pytest

from cohort.rpc.gate import FairGate


def test_a_tenant_runs_at_most_its_share_and_queues_a_bounded_number():
    async def run():
        gate = FairGate(per_key=2, max_waiting=1)
        await gate.acquire("a")
        await gate.acquire("a")
        waiter = asyncio.ensure_future(gate.acquire("a"))  # third: waits, holding no place
        await asyncio.sleep(0.01)
        assert not waiter.done() and gate.full("a")  # 2 running + 1 waiting: a fourth is refused
        assert not gate.full("b") and not gate.full("")  # other tenants and untenanted calls are not affected
        await gate.acquire("b")
        gate.release("a")
        assert await asyncio.wait_for(waiter, 1)  # a place freed: the waiter runs
        assert gate.full("a") is False
        for tenant in ("a", "a", "b"):
            gate.release(tenant)
        assert gate.idle()  # nothing left behind per tenant

    asyncio.run(run())


def test_a_caller_that_gives_up_while_waiting_frees_its_place_in_the_queue():
    async def run():
        gate = FairGate(per_key=1, max_waiting=1)
        await gate.acquire("a")
        waiter = asyncio.ensure_future(gate.acquire("a"))
        await asyncio.sleep(0.01)
        assert gate.full("a")
        waiter.cancel()  # the client's deadline passed while it waited
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not gate.full("a")
        gate.release("a")
        assert gate.idle()

    asyncio.run(run())


def test_a_waiter_past_its_timeout_gets_no_place_and_leaves_nothing():
    async def run():
        gate = FairGate(per_key=4, capacity=1)
        assert await gate.acquire("a")
        assert await gate.acquire("b", timeout=0.05) is False  # "busy": the caller answers at once
        assert gate.waiting == 0
        gate.release("a")
        assert gate.idle()

    asyncio.run(run())


def test_the_least_served_key_goes_first_then_the_oldest():
    """Capacity 1: a key that has held places for long (a looping session) waits behind a newcomer that
    arrived after it; among keys with equal use, arrival order."""
    async def run():
        gate = FairGate(per_key=4, capacity=1)
        assert await gate.acquire("hog")
        order = []

        async def call(key):
            assert await gate.acquire(key)
            order.append(key)
            gate.release(key, 5.0 if key == "hog" else 0.01)

        tasks = [asyncio.ensure_future(call(k)) for k in ("hog", "hog", "new1", "new2")]
        await asyncio.sleep(0.01)
        gate.release("hog", 5.0)  # the first hog call ran to its 5 s limit
        await asyncio.gather(*tasks)
        assert order == ["new1", "new2", "hog", "hog"]
        assert gate.idle()

    asyncio.run(run())


def test_the_overall_capacity_and_the_per_key_cap_hold_together():
    async def run():
        gate = FairGate(per_key=2, capacity=3)
        for key in ("a", "a", "b"):
            assert await gate.acquire(key)
        assert gate.running == 3
        third_a = asyncio.ensure_future(gate.acquire("a"))
        c = asyncio.ensure_future(gate.acquire("c"))
        await asyncio.sleep(0.01)
        assert not third_a.done() and not c.done()  # the gate is full
        gate.release("b")
        assert await asyncio.wait_for(c, 1)  # "a" is at its cap: the place goes to "c"
        assert not third_a.done()
        gate.release("a")
        assert await asyncio.wait_for(third_a, 1)
        for key in ("a", "a", "c"):
            gate.release(key)
        assert gate.idle()

    asyncio.run(run())


def test_with_spill_a_key_alone_uses_every_place_and_yields_them_to_a_newcomer():
    async def run():
        gate = FairGate(per_key=1, capacity=3, spill=True)
        for _ in range(3):  # over its cap of 1, but nobody else waits: no place idles
            assert await gate.acquire("a", timeout=0.05)
        extra = asyncio.ensure_future(gate.acquire("a"))
        newcomer = asyncio.ensure_future(gate.acquire("b"))
        await asyncio.sleep(0.01)
        gate.release("a", 1.0)
        assert await asyncio.wait_for(newcomer, 1) and not extra.done()  # the freed place goes to "b"
        gate.release("a", 1.0)
        assert await asyncio.wait_for(extra, 1)
        for key in ("a", "a", "b"):
            gate.release(key)
        assert gate.idle()

    asyncio.run(run())


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError):
        FairGate(per_key=0, max_waiting=1)
    with pytest.raises(ValueError):
        FairGate(per_key=1, spill=True)  # spilling over what? it needs an overall capacity
