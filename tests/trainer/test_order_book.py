"""The pipeline's order book (admission and rejection) and dynamic sampling, driven alone: no threads, no
processes, no verifiers. The pipeline's own tests (test_pipeline.py) run them with real workers."""

from __future__ import annotations

import collections

import pytest

from cohort.trainer.data import PromptSampler
from cohort.trainer.rounds.dynamic import DynamicSampling
from cohort.trainer.rounds.order_book import OrderBook

PROMPTS = [[i] for i in range(40)]  # prompt i's token ids: [i]


def _consume(book: OrderBook, sampler: PromptSampler, steps: int, p: int, late: int = 0):
    """A learner with instant workers: each round tops up, takes the oldest orders' groups in order (``late``
    further rounds of orders sent ahead, as a design without admission would), rejects stale ones; one update a
    round. Returns each round's lags (the learner's version minus the order's), the prompts consumed and those
    unpacked but not consumed."""
    ready: collections.deque[tuple[int, int]] = collections.deque()  # (idx, version) unpacked, not consumed
    lags, consumed = [], []
    for version in range(steps):
        kept: list[tuple[int, int]] = []
        while len(kept) < p:
            book.admit(p - len(kept) + late * p, len(ready), version, PROMPTS, sampler)
            if not ready:
                order = book.unpack(min(book.orders))  # the oldest order out arrives
                ready.extend((i, order.min_version) for i in order.idx)
            idx, generated = ready.popleft()
            if not book.stale(idx, generated, version):
                kept.append((idx, generated))
        book.admit(late * p, len(ready), version, PROMPTS, sampler)
        lags.append([version - generated for _, generated in kept])
        consumed += [idx for idx, _ in kept]
    return lags, consumed, [idx for idx, _ in ready]


@pytest.mark.parametrize("k", [1, 2, 4])
def test_admission_alone_keeps_every_group_within_k_versions_and_drops_none(k):
    book, sampler = OrderBook(k, p=4, chunk=2, workers=2), PromptSampler(40, 4, 0)
    lags, _, _ = _consume(book, sampler, steps=12, p=4)
    assert max(max(r) for r in lags) == k  # it runs ahead of the learner, and exactly as far as allowed
    assert book.dropped_stale == 0
    assert book.outstanding(0) == k * 4  # between rounds: k * P ordered and not consumed


def test_rejection_drops_what_arrives_past_the_bound_and_orders_its_prompt_again_first():
    """With admission defeated (orders sent 3 rounds further ahead), groups arrive too old: none is consumed,
    each is counted, and every prompt drawn is consumed or still pending."""
    book, sampler = OrderBook(1, p=4, chunk=2, workers=2), PromptSampler(40, 4, 0)
    lags, consumed, ready = _consume(book, sampler, steps=8, p=4, late=3)
    assert max(max(r) for r in lags) <= 1 and book.dropped_stale > 0
    drawn = PromptSampler(40, 4, 0).next(sampler.position)
    assert collections.Counter(consumed + book.pending(ready)) == collections.Counter(drawn)
    # a rejected prompt goes to the front of the next order, which names the learner's version
    book2, sampler2 = OrderBook(1, p=4, chunk=2, workers=2), PromptSampler(40, 4, 0)
    assert book2.stale(7, generated=0, version=2) and list(book2.requeue) == [7]
    (worker, order), *_ = book2.admit(4, 0, 2, PROMPTS, sampler2)
    assert order.idx[0] == 7 and order.prompts[0] == [7] and order.min_version == 2
    assert not book2.stale(8, generated=1, version=2) and book2.dropped_stale == 1


def test_every_prompt_drawn_is_consumed_or_pending():
    book, sampler = OrderBook(2, p=4, chunk=2, workers=3), PromptSampler(40, 4, 0)
    ready: collections.deque[int] = collections.deque()
    consumed = []
    for version in range(5):
        book.admit(4, len(ready), version, PROMPTS, sampler)
        while len(ready) < 4:
            ready.extend(book.unpack(min(book.orders)).idx)
        consumed += [ready.popleft() for _ in range(4)]
    drawn = PromptSampler(40, 4, 0).next(sampler.position)
    assert collections.Counter(consumed + book.pending(list(ready))) == collections.Counter(drawn)
    resumed = OrderBook(2, p=4, chunk=2, workers=3)
    resumed.load(book.pending(list(ready)))
    first = resumed.admit(4, 0, 0, PROMPTS, PromptSampler(40, 4, 0))
    assert [i for _, o in first for i in o.idx][:4] == book.pending(list(ready))[:4]  # ordered again first


def test_orders_go_to_the_least_loaded_worker():
    book, sampler = OrderBook(3, p=4, chunk=2, workers=3), PromptSampler(40, 4, 0)
    sent = book.admit(4, 0, 0, PROMPTS, sampler)
    assert [w for w, _ in sent] == [1, 2, 3, 1, 2, 3, 1, 2]  # 16 groups in orders of 2, spread evenly
    book.unpack(sent[1][1].id)  # worker 2's first order came back
    (worker, _), = book.admit(4, 0, 0, PROMPTS, sampler)  # ready 0: that order's groups were consumed
    assert worker == 2


def test_lost_orders_are_ordered_again_first_and_arrivals_stay():
    book, sampler = OrderBook(1, p=4, chunk=2, workers=2), PromptSampler(40, 4, 0)
    sent = [o for _, o in book.admit(4, 0, 0, PROMPTS, sampler)]
    lost = book.lose(arrived={sent[1].id})  # the workers died; order 1's rows had arrived
    assert [o.id for o in lost] == [sent[0].id, sent[2].id, sent[3].id]
    assert list(book.requeue) == sent[0].idx + sent[2].idx + sent[3].idx
    assert list(book.orders) == [sent[1].id]
    again = [o for _, o in book.admit(4, 2, 1, PROMPTS, sampler)]
    assert [i for o in again for i in o.idx] == sent[0].idx + sent[2].idx  # up to k*P + 4 with the 2 arrived


def test_two_learners_order_disjoint_shares_of_the_same_draws():
    books = [OrderBook(1, p=2, chunk=1, workers=1, rank=r, world=2) for r in (0, 1)]
    samplers = [PromptSampler(40, 4, 0), PromptSampler(40, 4, 0)]
    idx = [[i for _, o in b.admit(2, 0, 0, PROMPTS, s) for i in o.idx] for b, s in zip(books, samplers)]
    assert not set(idx[0]) & set(idx[1]) and len(idx[0]) == len(idx[1]) == 4
    books[0].draw_to(books[1].draws + 1, samplers[0])  # before a save: one sampler position for both
    assert samplers[0].position == 12 and len(books[0].mine) == 2


def test_dynamic_sampling_refills_flat_groups_then_fills_with_the_last_batch():
    pick = DynamicSampling(4, refills=2)
    assert pick.close([True, False, True, False]) == [0, 2] and pick.size == 2
    assert pick.close([False, False]) == [] and pick.size == 2
    assert pick.close([False, True]) is None and pick.size == 0  # refills ran out: the last batch fills the round
    assert pick.resampled == 4
    with pytest.raises(ValueError, match="0 were asked"):
        pick.close([True])


def test_dynamic_sampling_stops_when_every_group_has_signal_and_is_off_with_no_refill():
    pick = DynamicSampling(3, refills=5)
    assert pick.close([False, True, True]) == [1, 2] and pick.size == 1
    assert pick.close([True]) is None and pick.resampled == 1
    off = DynamicSampling(3, refills=0)
    assert off.close([False, False, False]) is None and off.resampled == 0
