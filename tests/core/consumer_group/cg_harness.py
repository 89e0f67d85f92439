"""A driver for the consumer-group core, as the runtime will drive it: every outcome's records go through
the byte codec (encode, decode) and ``replay``; deadlines are kept per key on a manual clock, and
``advance(ms)`` fires the due ones (their records are replayed the same way). Member ids are generated
deterministically ("gen-0", "gen-1", ...)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from coordinator.core.consumer_group import ConsumerGroupConfig, ConsumerGroups, HeartbeatOutcome, TopicInfo
from coordinator.core.consumer_group import records as R
from coordinator.core.consumer_group.assignors import Assignor
from coordinator.core.consumer_group.group import ConsumerGroup
from coordinator.core.consumer_group.member import Member


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def tps(**topics: Iterable[int]) -> list[dict[str, Any]]:
    """Request/response topic_partitions for ``topic=[partitions]``, sorted like the core writes them."""
    return sorted(({"topic_id": topic_id(t), "partitions": sorted(ps)} for t, ps in topics.items() if ps),
                  key=lambda tp: tp["topic_id"].bytes)


def assigned(**topics: Iterable[int]) -> dict[uuid.UUID, frozenset[int]]:
    return {topic_id(t): frozenset(ps) for t, ps in topics.items() if ps}


class Driver:
    def __init__(self, config: ConsumerGroupConfig | None = None,
                 assignors: Mapping[str, Assignor] | None = None) -> None:
        self.counter = 0
        self.cg = ConsumerGroups(config, new_member_id=self._next_id, assignors=assignors)
        self.now = 0
        self.topics: dict[str, TopicInfo] = {}
        self.log: list[R.Record] = []
        self.timers: dict[tuple[str, str, str], tuple[int, int]] = {}  # key -> (deadline, epoch)

    def _next_id(self) -> str:
        self.counter += 1
        return f"gen-{self.counter - 1}"

    def topic(self, name: str, partitions: int) -> uuid.UUID:
        self.topics[name] = TopicInfo(topic_id(name), partitions)
        return topic_id(name)

    def group(self, group_id: str = "g") -> ConsumerGroup:
        return self.cg.groups[group_id]

    def member(self, member_id: str, group_id: str = "g") -> Member:
        return self.cg.groups[group_id].members[member_id]

    # ---- driving
    def apply(self, outcome: HeartbeatOutcome) -> HeartbeatOutcome:
        for record in outcome.records:
            key, value = R.encode_record(record)
            decoded = R.decode_record(key, value)
            assert decoded == record
            self.cg.replay(decoded)
            self.log.append(decoded)
        for g in self.cg.groups.values():  # the O(1) state's count agrees with a scan after every record batch
            assert g.unreconciled == sum(1 for m in g.members.values() if not m.is_reconciled_to(g.assignment_epoch))
        for d in outcome.deadlines:
            if d.at_ms is None:
                self.timers.pop(d.key, None)
            else:
                self.timers[d.key] = (d.at_ms, d.epoch)
        return outcome

    def send(self, version: int = 1, client_id: str = "client", client_host: str = "/127.0.0.1",
             **request: Any) -> dict[str, Any]:
        """A heartbeat with ``request`` fields over defaults (group "g", epoch 0 not assumed)."""
        body = {"group_id": "g", "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
                "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
                "server_assignor": None, "topic_partitions": None, **request}
        out = self.apply(self.cg.heartbeat(body, version, self.now, self.topics, client_id, client_host))
        assert out.response is not None
        return out.response

    def join(self, member_id: str, topics: list[str], *, instance_id: str | None = None,
             rebalance_timeout_ms: int = 300000, version: int = 1, **more: Any) -> dict[str, Any]:
        return self.send(version=version, member_id=member_id, member_epoch=0, instance_id=instance_id,
                         rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topic_names=topics,
                         topic_partitions=[], **more)

    def beat(self, member_id: str, epoch: int, owned: list[dict[str, Any]] | None, **more: Any) -> dict[str, Any]:
        return self.send(member_id=member_id, member_epoch=epoch, topic_partitions=owned, **more)

    def settle(self, member_id: str) -> dict[str, Any]:
        """Heartbeat reporting exactly what the member is assigned now."""
        m = self.member(member_id)
        owned = [{"topic_id": t, "partitions": sorted(ps)} for t, ps in m.assigned.items()]
        return self.beat(member_id, m.member_epoch, owned)

    def advance(self, ms: int) -> list[tuple[str, str, str]]:
        """Move the clock; fire due deadlines in deadline order; return the fired keys."""
        self.now += ms
        fired = []
        while True:
            due = sorted((at, key) for key, (at, _) in self.timers.items() if at <= self.now)
            if not due:
                return fired
            _, key = due[0]
            _, epoch = self.timers.pop(key)
            kind, group_id, member_id = key
            if kind == "session":
                out = self.cg.expire_session(group_id, member_id, self.now, self.topics)
            else:
                out = self.cg.expire_rebalance(group_id, member_id, epoch, self.now, self.topics)
            self.apply(out)
            fired.append(key)

    def replayed_fresh(self) -> ConsumerGroups:
        fresh = ConsumerGroups(self.cg.config)
        for record in self.log:
            fresh.replay(record)
        return fresh
