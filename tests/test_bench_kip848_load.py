"""The KIP-848 benchmark's load generator (tests/bench/bench_kip848.py), the part that kept 10,000 members from
ever settling: its CreateTopics waited on a connection the server had refused (``max.connections``, 10,000 by
default, all taken by the classic members), feeding the empty reads of the closed socket for ever. It must fail
at once instead; and the partitions of a big group are spread over topics within the server's cap per topic.
A local listener that closes every connection stands in for the refusing server (127.0.0.1, a free port); the
wait is bounded (trio.fail_after)."""

from __future__ import annotations

import pytest
import trio

from tests.bench.bench_kip848 import MAX_TOPIC_PARTITIONS, BenchError, create_topic, topic_counts


async def _refusing_listener(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    task_status.started(sock.getsockname()[1])
    with sock:
        for _ in range(8):  # bounded: the test makes one connection
            conn, _ = await sock.accept()
            conn.close()


def test_create_topic_fails_when_the_server_closes_the_connection() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(_refusing_listener)
            with trio.fail_after(10), pytest.raises(BenchError, match="closed the connection"):
                await create_topic(port, "t", 10)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_partitions_are_spread_over_topics_within_the_servers_cap() -> None:
    assert topic_counts(2_000) == [2_000]
    assert topic_counts(MAX_TOPIC_PARTITIONS) == [MAX_TOPIC_PARTITIONS]
    assert topic_counts(20_000) == [10_000, 10_000]
    counts = topic_counts(25_001)
    assert sum(counts) == 25_001 and len(counts) == 3 and max(counts) <= MAX_TOPIC_PARTITIONS
    assert max(counts) - min(counts) <= 1
