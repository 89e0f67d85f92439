"""Our consumers in a real group: sharing, crash takeover, poll timeout, static restart, durable commits.

REQUIRES (module-level check, ``require_server_apis``): these tests need, from the server under test,
  FindCoordinator (10), JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13),
  OffsetCommit (8), OffsetFetch (9), DescribeGroups (15), DeleteGroups (42),
  CreateTopics (19) and Metadata (3) answering topics with partitions.
They run against `groupcoord serve` by default; GROUPCOORD_CLIENT_BROKER=tansu runs them against the
reference broker. When the server lacks one of these APIs every test here FAILS with a message naming it
(they are never skipped).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from client import AdminClient, Consumer, ConsumerRebalanceListener, OffsetAndMetadata, TopicPartition
from client.consumer import NoRecords
from client.errors import CommitFailedError, KafkaError

if TYPE_CHECKING:  # annotations only: imported by name, "conftest" may be another folder's (tests/integration)
    from conftest import Broker  # type: ignore[import-not-found]

REQUIRED_APIS = {10: "FindCoordinator", 11: "JoinGroup", 14: "SyncGroup", 12: "Heartbeat", 13: "LeaveGroup",
                 8: "OffsetCommit", 9: "OffsetFetch", 15: "DescribeGroups", 42: "DeleteGroups",
                 19: "CreateTopics", 3: "Metadata"}
SESSION_MS = 2000
CHILD = Path(__file__).parent / "member_child.py"


@pytest.fixture(autouse=True)
def require_server_apis(broker: Broker) -> None:
    """Fail (not skip) with the missing API's name when the server cannot run this module."""
    try:
        with AdminClient(broker.bootstrap, request_timeout_ms=5000) as admin:
            results = admin.create_topics({"probe": 2})
            assert results[0].error_code == 0, f"CreateTopics (19) answered {results[0].error}"
            topics = admin.list_topics()
            assert topics.get("probe") and topics["probe"].partitions == 2, \
                f"Metadata (3) does not list topic 'probe' with 2 partitions: {topics}"
            admin.cluster.find_coordinator("probe-group")
            admin.list_group_offsets("probe-group")
            admin.describe_groups(["probe-group"])
    except (KafkaError, AssertionError) as e:
        pytest.fail(f"{broker.kind} server lacks an API test_member_live.py needs "
                    f"({', '.join(f'{n} ({k})' for k, n in REQUIRED_APIS.items())}): {e}")


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, list[int]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", sorted(p for _, p in revoked)))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", sorted(p for _, p in assigned)))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append(("lost", sorted(p for _, p in lost)))


class Polling:
    """A consumer polled by its own thread (the application thread) until stopped or paused."""

    def __init__(self, consumer: Consumer, topic: str) -> None:
        self.consumer, self.listener = consumer, Recorder()
        consumer.subscribe([topic], self.listener)
        self.run_polls = threading.Event()
        self.run_polls.set()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            if not self.run_polls.is_set():
                time.sleep(0.02)
                continue
            try:
                self.consumer.poll(50)
            except KafkaError as e:
                self.errors.append(e)

    def partitions(self) -> list[int]:
        return sorted(p for _, p in self.consumer.assignment()) if self.stable() else []

    def stable(self) -> bool:
        return self.consumer.member.generation_if_stable() is not None and not self.consumer.member.rejoin_needed

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.consumer.close(timeout_ms=5000)


@pytest.fixture
def topic(broker: Broker) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    with AdminClient(broker.bootstrap) as admin:
        assert admin.create_topics({name: 6})[0].error_code == 0
    return name


@pytest.fixture
def consumers(broker: Broker) -> Iterator[Callable[..., Consumer]]:
    made: list[Consumer] = []

    def make(group: str, **kw: object) -> Consumer:
        settings: dict[str, object] = dict(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=200,
                                           max_poll_interval_ms=30000, request_timeout_ms=10000)
        settings.update(kw)
        c = Consumer(bootstrap_servers=broker.bootstrap, group_id=group, **settings)  # type: ignore[arg-type]
        made.append(c)
        return c

    yield make
    for c in made:
        c.close(timeout_ms=2000)


def all_stable(members: list[Polling], partitions: int) -> bool:
    if not all(m.stable() for m in members):
        return False
    gens = {m.consumer.generation().generation_id for m in members}
    owned = [p for m in members for p in m.partitions()]
    return len(gens) == 1 and sorted(owned) == list(range(partitions))


def test_three_members_share_six_partitions_by_range(consumers: Callable[..., Consumer], topic: str,
                                                     broker: Broker) -> None:
    members = [Polling(consumers("g-share"), topic) for _ in range(3)]
    wait_until(lambda: all_stable(members, 6), 20, "three members to share the topic")
    by_member = {m.consumer.generation().member_id: m.partitions() for m in members}
    # range: members sorted by id take contiguous pairs
    assert [by_member[mid] for mid in sorted(by_member)] == [[0, 1], [2, 3], [4, 5]]
    with AdminClient(broker.bootstrap) as admin:
        desc = admin.describe_groups(["g-share"])[0]
    assert desc.state == "Stable" and sorted(m.member_id for m in desc.members) == sorted(by_member)
    for m in members:
        m.close()


def test_a_killed_member_loses_its_partitions_to_the_others_after_the_session_timeout(
        consumers: Callable[..., Consumer], topic: str, broker: Broker) -> None:
    child = subprocess.Popen([sys.executable, str(CHILD), broker.bootstrap, "g-kill", topic, str(SESSION_MS)],
                             stdout=subprocess.PIPE, text=True)
    try:
        survivors = [Polling(consumers("g-kill"), topic) for _ in range(2)]
        child_view: dict[str, object] = {}

        def child_has_two() -> bool:
            assert child.stdout is not None
            line = child.stdout.readline()
            child_view.update(json.loads(line))
            return len(child_view["partitions"]) == 2  # type: ignore[arg-type]

        wait_until(child_has_two, 20, "the child member to own 2 of 6 partitions")
        wait_until(lambda: sorted(p for s in survivors for p in s.partitions()) ==
                   sorted(set(range(6)) - set(child_view["partitions"])),  # type: ignore[arg-type]
                   20, "the survivors to own the other 4")
        child.send_signal(signal.SIGKILL)
        child.wait(5)
        killed_at = time.monotonic()
        wait_until(lambda: all_stable(survivors, 6), 20, "the survivors to take over all six partitions")
        took = time.monotonic() - killed_at
        assert took >= SESSION_MS / 1000 * 0.5, f"rebalanced after {took:.2f}s, before the session could expire"
        assert all(len(s.partitions()) == 3 for s in survivors)
        for s in survivors:
            s.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)


def test_a_member_that_stops_polling_leaves_after_max_poll_interval(consumers: Callable[..., Consumer],
                                                                    topic: str) -> None:
    steady = Polling(consumers("g-slow"), topic)
    slow = Polling(consumers("g-slow", max_poll_interval_ms=1500), topic)
    wait_until(lambda: all_stable([steady, slow], 6), 20, "two members to share the topic")
    slow_had = slow.partitions()
    slow.run_polls.clear()
    stopped_at = time.monotonic()
    wait_until(lambda: steady.stable() and steady.partitions() == list(range(6)), 20,
               "the steady member to get everything")
    assert time.monotonic() - stopped_at >= 1.0
    slow.run_polls.set()  # back: its partitions are reported lost, then it rejoins
    wait_until(lambda: all_stable([steady, slow], 6), 20, "the slow member to rejoin")
    assert ("lost", slow_had) in slow.listener.events
    for m in (steady, slow):
        m.close()


def test_a_static_member_restarting_within_the_session_timeout_causes_no_rebalance(
        consumers: Callable[..., Consumer], topic: str) -> None:
    other = Polling(consumers("g-static", group_instance_id="static-a"), topic)
    first = Polling(consumers("g-static", group_instance_id="static-b"), topic)
    wait_until(lambda: all_stable([other, first], 6), 20, "two static members to share the topic")
    generation = other.consumer.generation().generation_id
    had = first.partitions()
    other.listener.events.clear()  # the two may have formed the group in one rebalance or two
    first.close()  # static: no LeaveGroup
    again = Polling(consumers("g-static", group_instance_id="static-b"), topic)
    wait_until(lambda: again.stable(), SESSION_MS / 1000 * 1.5, "the restarted static member to be stable")
    assert again.partitions() == had
    time.sleep(SESSION_MS / 1000)  # past the old session: still no rebalance
    assert other.consumer.generation().generation_id == generation and other.stable()
    assert other.listener.events == []  # nothing revoked or reassigned: no rebalance happened
    for m in (other, again):
        m.close()


def test_commits_survive_a_restart_of_the_member(consumers: Callable[..., Consumer], topic: str,
                                                 broker: Broker) -> None:
    member = Polling(consumers("g-commit", enable_auto_commit=False), topic)
    wait_until(lambda: all_stable([member], 6), 20, "the member to own the topic")
    member.run_polls.clear()
    time.sleep(0.1)
    tp0, tp3 = TopicPartition(topic, 0), TopicPartition(topic, 3)
    member.consumer.commit({tp0: OffsetAndMetadata(42, "batch-7"), tp3: 7})
    assert member.consumer.committed([tp0, tp3]) == {tp0: OffsetAndMetadata(42, "batch-7", -1),
                                                     tp3: OffsetAndMetadata(7, "", -1)}
    member.close()
    with AdminClient(broker.bootstrap) as admin:
        offsets = admin.list_group_offsets("g-commit")
        assert (offsets[tp0].offset, offsets[tp0].metadata, offsets[tp3].offset) == (42, "batch-7", 7)
    # the topic is empty, so a fetcher would (rightly) reset offset 42 as out of range: this test is about
    # commits and position initialisation, so the restarted member fetches nothing
    again = Polling(consumers("g-commit", enable_auto_commit=False, record_source=NoRecords()), topic)
    wait_until(lambda: all_stable([again], 6), 20, "the restarted member to own the topic")
    again.run_polls.clear()
    time.sleep(0.1)
    assert again.consumer.position(tp0) == 42 and again.consumer.position(tp3) == 7
    assert again.consumer.committed([tp0])[tp0] == OffsetAndMetadata(42, "batch-7", -1)
    again.close()
    with AdminClient(broker.bootstrap) as admin:
        assert [r.error_code for r in admin.delete_groups(["g-commit"])] == [0]


def test_a_commit_after_the_member_left_on_poll_timeout_raises_commit_failed(
        consumers: Callable[..., Consumer], topic: str) -> None:
    member = Polling(consumers("g-fence", enable_auto_commit=False, max_poll_interval_ms=1000), topic)
    wait_until(lambda: all_stable([member], 6), 20, "the member to own the topic")
    member.run_polls.clear()
    wait_until(lambda: member.consumer.generation().generation_id == -1, 10,
               "the heartbeat thread to leave the group after max.poll.interval.ms")
    with pytest.raises(CommitFailedError):
        member.consumer.commit({TopicPartition(topic, 0): 1}, timeout_ms=3000)
    member.close()


def test_cooperative_sticky_moves_only_what_it_must_and_never_double_assigns(
        consumers: Callable[..., Consumer], topic: str) -> None:
    """KIP-429: when a member joins, the others give up only the partitions that move, in a first rebalance,
    and the newcomer receives them in a second; nobody loses a partition it keeps."""
    from client.assignors import CooperativeStickyAssignor

    def member(name: str) -> Polling:
        return Polling(consumers("g-coop", client_id=name,
                                 partition_assignment_strategy=[CooperativeStickyAssignor()]), topic)

    a, b = member("a"), member("b")
    wait_until(lambda: all_stable([a, b], 6), 20, "two cooperative members to share the topic")
    before = {"a": set(a.partitions()), "b": set(b.partitions())}
    a.listener.events.clear()
    b.listener.events.clear()
    c = member("c")
    wait_until(lambda: all_stable([a, b, c], 6), 30, "the third member to receive partitions")
    after = {"a": set(a.partitions()), "b": set(b.partitions()), "c": set(c.partitions())}
    assert sorted(len(v) for v in after.values()) == [2, 2, 2]
    for name, m in (("a", a), ("b", b)):
        assert after[name] <= before[name], "sticky: an old member only gives partitions away"
        revoked = set().union(*[set(p) for kind, p in m.listener.events if kind == "revoked"])
        assert revoked == before[name] - after[name], "cooperative: revoke exactly what moved"
        assert all(kind != "lost" for kind, _ in m.listener.events)
    assert after["c"] == (before["a"] - after["a"]) | (before["b"] - after["b"])
    for m in (a, b, c):
        m.close()
