"""RetryingConsumer against the real daemon: how retry partitions are held and fetched ahead, and when offsets
are committed.

- Parked records are fetched ahead: a retry partition full of copies falling due one after another is paused
  while its head is far from due, fetched again (while records are still parked) as they come due, paused
  again once it holds enough; every copy is handled once, in offset order, never before its due time, and
  no more records are ever held than the bound of the module rules.
- Close with a copy still unacknowledged (the daemon is stopped, SIGSTOP, so the acknowledgement cannot come
  before the ack timeout): the synchronous commit stops at that copy's record; the one after the daemon is
  back (the copy acknowledged) commits everything.
- One async commit in flight at a time, also while the daemon does not answer for a while (SIGSTOP) and the
  records already fetched are handled meanwhile; the handled offsets are committed in the end.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer
from server_process import ServerProcess

from client.admin import AdminClient, NewTopic
from client.consumer_protocol import TopicPartition
from client.fetcher import ConsumerRecord
from client.producer import Producer
from client.retry import PARK_MAX_POLLS, RetryingConsumer, RetryPolicy
from client.retry_policy import Origin, copy_headers

FLAGS = ("--num-partitions", "1", "--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("retry-prefetch") / "data", *FLAGS).start()
    try:
        yield server
    finally:
        server.stop()


def committed(bootstrap: str, group: str) -> dict[TopicPartition, int]:
    with AdminClient(bootstrap) as admin:
        return {tp: o.offset for tp, o in admin.list_group_offsets(group).items()}


def read_topic(bootstrap: str, topic: str) -> list[Any]:
    kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None,
                       enable_auto_commit=False, consumer_timeout_ms=1500)
    try:
        return list(kc)
    finally:
        kc.close()


def test_parked_records_are_fetched_ahead_and_handled_in_order_no_earlier_than_due(srv: ServerProcess) -> None:
    topic = f"ahead-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    policy = RetryPolicy.parse("1s")
    retry_tp = TopicPartition(policy.retry_topic(topic, "1s"), 0)
    with AdminClient(srv.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    calls: list[tuple[int, int, float]] = []  # (offset, retry_timestamp, handling time ms)

    def handler(rec: ConsumerRecord) -> None:
        calls.append((rec.offset, int(dict(rec.headers)["retry_timestamp"]), time.time() * 1000))

    poll_records = 20
    count = 300
    rc = RetryingConsumer(bootstrap_servers=srv.bootstrap, group_id=group, topics=[topic], handler=handler,
                          policy=policy, max_poll_records=poll_records, session_timeout_ms=6000,
                          heartbeat_interval_ms=500)
    try:
        # copies as the retrying consumer writes them, falling due 5 ms apart from 1.5 s on
        base = int(time.time() * 1000) + 1500
        exc = RuntimeError("dependency down")
        copies = [(b"k%d" % i, b"v%d" % i, copy_headers((), 1, base + 5 * i, Origin(topic, 0, i), exc), base)
                  for i in range(count)]
        with Producer(srv.bootstrap, acks="all", batch_size=2048) as producer:  # many small batches
            assert producer.send_many(retry_tp.topic, 0, copies).wait(10)
        held_most = 0
        paused_while_parked = fetched_while_parked = 0
        deadline = time.monotonic() + 30
        while len(calls) < count and time.monotonic() < deadline:
            rc.poll_once(100)
            parked = rc._parked.get(retry_tp)
            if parked is not None:
                held_most = max(held_most, len(parked.recs) - parked.start)
                if retry_tp in rc.consumer.paused():
                    paused_while_parked += 1
                else:
                    fetched_while_parked += 1
    finally:
        rc.close()
    assert [c[0] for c in calls] == list(range(count))  # each once, in offset order
    early = [c for c in calls if c[2] < c[1]]
    assert not early, f"handled before their due time: {early[:5]}"
    assert held_most <= (PARK_MAX_POLLS + 1) * poll_records  # the bound: at most one poll's records past it
    assert paused_while_parked and fetched_while_parked, (paused_while_parked, fetched_while_parked)
    assert rc.stats.processed == count and len(rc.stats.lateness_ms) == count
    assert committed(srv.bootstrap, group).get(retry_tp) == count


def test_close_never_commits_past_a_copy_still_unacknowledged(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", *FLAGS).start()
    assert server.proc is not None
    pid = server.proc.pid
    resume = threading.Timer(2.0, os.kill, (pid, signal.SIGCONT))
    try:
        topic = f"unacked-{uuid.uuid4().hex[:6]}"
        group = f"g-{topic}"
        policy = RetryPolicy.parse("1s")
        tp = TopicPartition(topic, 0)
        with AdminClient(server.bootstrap) as admin:
            admin.create_topics([NewTopic(topic, 1)])
        with Producer(server.bootstrap, acks="all") as producer:
            for v in (b"a", b"b", b"c"):
                producer.send(topic, v)
            producer.flush(10)
        attempts: list[bytes] = []

        def handler(rec: ConsumerRecord) -> None:
            assert rec.value is not None
            attempts.append(rec.value)
            if rec.value == b"a" and not rec.headers:
                os.kill(pid, signal.SIGSTOP)  # its copy cannot be acknowledged before the daemon is back
                resume.start()
                raise RuntimeError("dependency down")

        rc = RetryingConsumer(bootstrap_servers=server.bootstrap, group_id=group, topics=[topic], handler=handler,
                              policy=policy, ack_timeout_ms=500, session_timeout_ms=20000,
                              heartbeat_interval_ms=1000, request_timeout_ms=20000)
        sync_commits: list[dict[TopicPartition, int]] = []
        commit_sync = rc.consumer.offsets.commit_sync

        def spy(offsets: Any, timeout_ms: Any, generation: Any = None) -> None:
            sync_commits.append({t: o.offset for t, o in offsets.items()})
            commit_sync(offsets, timeout_ms, generation=generation)

        rc.consumer.offsets.commit_sync = spy  # type: ignore[method-assign]
        assert rc.producer.partitions_for(policy.retry_topic(topic, "1s"))  # metadata known: the copy is sent
        try:
            deadline = time.monotonic() + 20
            while b"c" not in attempts and time.monotonic() < deadline:
                rc.poll_once(100)
            assert attempts[:3] == [b"a", b"b", b"c"]
        finally:
            rc.close()  # the first commit: the daemon is still stopped, the copy of "a" not acknowledged
        resume.join(10)
        assert sync_commits, "close committed nothing"
        assert sync_commits[0].get(tp) == 0, sync_commits  # not past "a", whose copy was not acknowledged
        assert sync_commits[-1].get(tp) == 3, sync_commits  # at revocation the copy was: everything
        assert committed(server.bootstrap, group).get(tp) == 3
        assert [r.value for r in read_topic(server.bootstrap, policy.retry_topic(topic, "1s"))] == [b"a"]
    finally:
        resume.cancel()
        os.kill(pid, signal.SIGCONT)
        server.stop()


def test_one_async_commit_in_flight_at_a_time_and_every_handled_offset_committed(srv: ServerProcess) -> None:
    topic = f"commits-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    count = 3000
    with AdminClient(srv.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    with Producer(srv.bootstrap, acks="all") as producer:
        for i in range(count):
            producer.send(topic, b"%d" % i)
        producer.flush(20)
    first_attempts = 0
    assert srv.proc is not None
    pid = srv.proc.pid
    resume = threading.Timer(0.5, os.kill, (pid, signal.SIGCONT))

    def handler(rec: ConsumerRecord) -> None:
        nonlocal first_attempts
        assert rec.value is not None
        if not rec.headers:
            first_attempts += 1
            if int(rec.value) == count // 3:  # no answer for a while: the records fetched are handled meanwhile
                rc.producer.flush(10)  # (the copies so far acknowledged: nothing holds the commits back)
                os.kill(pid, signal.SIGSTOP)
                resume.start()
            if int(rec.value) % 3 == 0 and int(rec.value) < count // 6:
                raise RuntimeError("dependency down")

    rc = RetryingConsumer(bootstrap_servers=srv.bootstrap, group_id=group, topics=[topic], handler=handler,
                          policy=RetryPolicy.parse("1h"), max_poll_records=50)
    in_flight = most = sent = 0
    commit_async = rc.consumer.commit_async

    def spy(offsets: Any, callback: Any) -> None:
        nonlocal in_flight, most, sent

        def done(o: Any, error: Any) -> None:
            nonlocal in_flight
            in_flight -= 1
            callback(o, error)

        in_flight += 1
        sent += 1
        most = max(most, in_flight)
        commit_async(offsets, done)

    rc.consumer.commit_async = spy  # type: ignore[method-assign]
    try:
        deadline = time.monotonic() + 30
        while first_attempts < count and time.monotonic() < deadline:
            rc.poll_once(100)
        assert first_attempts == count
    finally:
        resume.cancel()
        os.kill(pid, signal.SIGCONT)
        rc.close()
    assert sent >= 1 and most == 1, (sent, most)
    assert committed(srv.bootstrap, group).get(TopicPartition(topic, 0)) == count
    assert rc.stats.retried == {"1h": len(range(0, count // 6, 3))}


class Unparseable(ValueError):
    pass


def test_copies_of_one_round_to_several_destinations_are_acknowledged_and_committed(srv: ServerProcess) -> None:
    """One poll's failures of a partition go to the retry topic (which has fewer partitions: the key's partition)
    and to the failed topic (not retryable): each destination gets its copies in order, all are counted once
    acknowledged, and both source partitions are committed to their ends."""
    topic = f"dests-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    policy = RetryPolicy.parse("1h", not_retryable=[Unparseable])
    retry_topic, failed_topic = policy.retry_topic(topic, "1h"), policy.failed_topic(topic)
    with AdminClient(srv.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 2), NewTopic(retry_topic, 1)])
    values = {p: [b"p%d-%d%s" % (p, i, b"-bad" if i % 5 == 0 else b"") for i in range(40)] for p in (0, 1)}
    with Producer(srv.bootstrap, acks="all") as producer:
        for p, vs in values.items():
            for v in vs:
                producer.send(topic, v, key=v, partition=p)
        producer.flush(10)

    def handler(rec: ConsumerRecord) -> None:
        assert rec.value is not None
        if rec.value.endswith(b"-bad"):
            raise Unparseable("bad record")
        if int(rec.value.split(b"-")[1]) % 2:
            raise RuntimeError("dependency down")

    rc = RetryingConsumer(bootstrap_servers=srv.bootstrap, group_id=group, topics=[topic], handler=handler,
                          policy=policy, max_poll_records=25)
    try:
        deadline = time.monotonic() + 20
        while rc.stats.attempts < 80 and time.monotonic() < deadline:
            rc.poll_once(100)
    finally:
        rc.close()
    bad = {p: [v for v in vs if v.endswith(b"-bad")] for p, vs in values.items()}
    odd = {p: [v for v in vs if not v.endswith(b"-bad") and int(v.split(b"-")[1]) % 2] for p, vs in values.items()}
    retried = read_topic(srv.bootstrap, retry_topic)
    failed = read_topic(srv.bootstrap, failed_topic)
    assert {r.partition for r in retried} == {0}
    for p in (0, 1):  # in each source partition's order, whatever the destination partition
        assert [r.value for r in retried if r.value.startswith(b"p%d-" % p)] == odd[p]
        assert sorted(r.value for r in failed if r.value.startswith(b"p%d-" % p)) == sorted(bad[p])
        assert all(r.partition == p for r in failed if r.value.startswith(b"p%d-" % p))
    assert rc.stats.retried == {"1h": len(odd[0]) + len(odd[1])}
    assert rc.stats.failed == len(bad[0]) + len(bad[1])
    assert committed(srv.bootstrap, group) == {TopicPartition(topic, 0): 40, TopicPartition(topic, 1): 40}


def test_unacknowledged_copies_stay_bounded_while_acknowledgements_lag(srv: ServerProcess,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon stops answering (SIGSTOP) with records already fetched: the poll loop handles them and sends
    their copies, and waits for the oldest once ``MAX_IN_FLIGHT_COPIES`` are unacknowledged, so no more than
    that many are ever in flight after a poll; once the daemon is back, everything is acknowledged and
    committed."""
    import client.retry as retry_module

    cap = 30
    monkeypatch.setattr(retry_module, "MAX_IN_FLIGHT_COPIES", cap)
    topic = f"bounded-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    count = 300
    with AdminClient(srv.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    with Producer(srv.bootstrap, acks="all") as producer:
        for i in range(count):
            producer.send(topic, b"%d" % i)
        producer.flush(20)
    assert srv.proc is not None
    pid = srv.proc.pid
    resume = threading.Timer(1.0, os.kill, (pid, signal.SIGCONT))
    first_attempts = 0

    def handler(rec: ConsumerRecord) -> None:
        nonlocal first_attempts
        if not rec.headers:
            first_attempts += 1
            if first_attempts == 20:  # the rest is fetched already: handled while no acknowledgement comes
                os.kill(pid, signal.SIGSTOP)
                resume.start()
            raise RuntimeError("dependency down")

    rc = RetryingConsumer(bootstrap_servers=srv.bootstrap, group_id=group, topics=[topic], handler=handler,
                          policy=RetryPolicy.parse("1h"), max_poll_records=10, ack_timeout_ms=20000,
                          session_timeout_ms=20000, heartbeat_interval_ms=1000, request_timeout_ms=20000)
    most = 0
    try:
        deadline = time.monotonic() + 30
        while first_attempts < count and time.monotonic() < deadline:
            rc.poll_once(100)
            most = max(most, rc._inflight_count)
        assert first_attempts == count
    finally:
        resume.cancel()
        os.kill(pid, signal.SIGCONT)
        rc.close()
    assert most <= cap, most
    assert rc.stats.retried == {"1h": count}
    assert committed(srv.bootstrap, group).get(TopicPartition(topic, 0)) == count
