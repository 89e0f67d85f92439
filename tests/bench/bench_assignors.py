"""Benchmark: time of each assignor for 1,000 members x 10,000 partitions (best of 3).

Run from the repository root:  .venv/bin/python -m tests.bench.bench_assignors

Cases (100 topics x 100 partitions = 10,000 partitions, 1,000 members):
- uniform:  every member subscribes to every topic; fresh group (no previous owners).
- uneven:   member i subscribes to the 50 topics starting at topic (i % 100) (wrapping), and every tenth
            member to all 100 topics; fresh group.
- rejoin:   the uniform group's sticky assignment is fed back as owned partitions while 10 members leave
            and 10 new ones join (sticky and cooperative-sticky only; the usual steady-state rebalance).
The figure is wall time of ``assign()`` only (subscriptions are built beforehand). Not a test: it asserts
only that every partition was assigned, so a broken assignor cannot post a good time.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from client.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from client.consumer_protocol import Subscription

TOPICS = [f"topic-{i:03d}" for i in range(100)]
PARTITIONS = {t: 100 for t in TOPICS}
MEMBERS = [f"consumer-{i:04d}-{(i * 7919) % 1000:03d}" for i in range(1000)]
COMMAND = ".venv/bin/python -m tests.bench.bench_assignors"


def uniform() -> dict[str, Subscription]:
    return {m: Subscription(tuple(TOPICS)) for m in MEMBERS}


def uneven() -> dict[str, Subscription]:
    subs = {}
    for i, m in enumerate(MEMBERS):
        topics = TOPICS if i % 10 == 0 else [TOPICS[(i + k) % 100] for k in range(50)]
        subs[m] = Subscription(tuple(topics))
    return subs


def rejoin() -> dict[str, Subscription]:
    first = StickyAssignor().assign(PARTITIONS, uniform())
    subs = {}
    for m in MEMBERS[10:]:
        subs[m] = Subscription(tuple(TOPICS), None, first[m].assigned_partitions, generation_id=1)
    for k in range(10):
        subs[f"new-consumer-{k}"] = Subscription(tuple(TOPICS), None, (), generation_id=-1)
    return subs


def best_of(n: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
        assert isinstance(result, dict)
    return best


def check_covered(result: dict, subs: dict[str, Subscription], cooperative: bool) -> None:
    assigned = [tp for a in result.values() for tp in a.assigned_partitions]
    topics = {t for s in subs.values() for t in s.topics}
    wanted = {(t, p) for t in topics for p in range(PARTITIONS[t])}
    assert len(assigned) == len(set(assigned)), "a partition was assigned twice"
    assert set(assigned) <= wanted and (cooperative or set(assigned) == wanted), "coverage is wrong"


def main() -> int:
    cases = {"uniform": uniform(), "uneven": uneven(), "rejoin": rejoin()}
    assignors = [RangeAssignor(), RoundRobinAssignor(), StickyAssignor(), CooperativeStickyAssignor()]
    print(f"# {COMMAND}")
    print(f"# python {sys.version.split()[0]}; 1,000 members x 10,000 partitions; best of 3; assign() only")
    print(f"{'assignor':<20} {'case':<8} {'seconds':>8}")
    for name, subs in cases.items():
        for assignor in assignors:
            if name == "rejoin" and not isinstance(assignor, StickyAssignor):
                continue
            result = assignor.assign(PARTITIONS, subs)
            check_covered(result, subs, assignor.rebalance_protocol == "cooperative")
            seconds = best_of(3, lambda a=assignor, s=subs: a.assign(PARTITIONS, s))
            print(f"{assignor.name:<20} {name:<8} {seconds:>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
