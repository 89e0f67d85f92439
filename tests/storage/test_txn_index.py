"""AbortedTxnIndex: marker order, Kafka's early-stopping search equals a plain filter, truncation."""

from __future__ import annotations

import random

import pytest

from coordinator.storage.producer_state import ProducerStates
from coordinator.storage.txn_index import AbortedTxn, AbortedTxnIndex
from protocol.record_batch import build_batch, parse_header


def test_entries_must_follow_in_marker_order() -> None:
    index = AbortedTxnIndex()
    index.append(AbortedTxn(1, 0, 5, 6))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 1, 5, 6))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 7, 6, 7))  # first after last
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 3, 6, 8))  # last stable offset above last + 1
    assert list(index) == [AbortedTxn(1, 0, 5, 6)]


def test_truncation_at_both_ends() -> None:
    index = AbortedTxnIndex()
    for i in range(5):
        index.append(AbortedTxn(i, 10 * i, 10 * i + 5, 10 * i + 6))  # last offsets 5, 15, 25, 35, 45
    assert index.truncate_before(15) == 1 and index.truncate_before(15) == 0
    assert [t.producer_id for t in index] == [1, 2, 3, 4]
    assert index.truncate_from(35) == 2
    assert [t.last_offset for t in index] == [15, 25]
    assert index.truncate_from(100) == 0 and len(index) == 2


def random_states(rng: random.Random, steps: int) -> ProducerStates:
    """Transactions of a few producer ids, interleaved, each ended by a random marker."""
    s = ProducerStates()
    seqs: dict[int, int] = {}
    offset = 0
    for _ in range(steps):
        pid = rng.randrange(5)
        if s.has_open_txn(pid) and rng.random() < 0.3:
            s.record_marker(pid, 0, 0, rng.random() < 0.4, offset)
            offset += 1
            continue
        n = rng.randint(1, 3)
        h = parse_header(build_batch([(None, b"v", (), 0)] * n, producer_id=pid, producer_epoch=0,
                                     base_sequence=seqs.get(pid, 0), transactional=True))
        assert s.check(h) is None
        s.record(h, offset)
        seqs[pid] = seqs.get(pid, 0) + n
        offset += n
    return s


def test_the_early_stopping_search_equals_a_plain_filter() -> None:
    for seed in range(25):
        rng = random.Random(seed)
        s = random_states(rng, 50)
        entries = s.aborted_transactions()
        end = entries[-1].last_offset + 2 if entries else 2
        for fetch in range(end):
            for upper in range(fetch, end + 1, 2):
                expected = sorted((t.producer_id, t.first_offset) for t in entries
                                  if t.last_offset >= fetch and t.first_offset < upper)
                assert sorted(s.aborted_between(fetch, upper)) == expected, (seed, fetch, upper)
                got = s.aborted_between(fetch, upper)
                assert [f for _, f in got] == sorted(f for _, f in got)
