"""Metadata response parts in cluster mode, built from a ``ClusterView``. Pure.

Rules (Kafka's ``MetadataCache``):
- Brokers: every registered (live) broker, in id order, with its advertised host, port and rack.
- A partition whose leader is not live (or NO_LEADER) answers LEADER_NOT_AVAILABLE with leader -1; its
  replicas and ISR are still listed, and ``offline_replicas`` names the replicas that are not live.
- Per listener (Kafka's ``getAliveEndpoints``): only brokers with an endpoint on the listener the request
  came in on are listed, at that endpoint; a partition whose live leader has no such endpoint answers
  LISTENER_NOT_FOUND (Metadata v6+; LEADER_NOT_AVAILABLE before) with leader -1.
- A topic with no assignment in ZooKeeper is not listed among all topics; asked by name it answers
  LEADER_NOT_AVAILABLE while it is being created (the caller decides whether creation was requested).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocol.errors import ErrorCode

from .state import NO_LEADER, ClusterView


def broker_entries(view: ClusterView, listener: str) -> list[dict[str, Any]]:
    out = []
    for b in sorted(view.brokers.values(), key=lambda b: b.node_id):
        at = b.endpoint(listener)
        if at is not None:
            out.append({"node_id": b.node_id, "host": at[0], "port": at[1], "rack": b.rack})
    return out


def topic_entry(view: ClusterView, topic: str, topic_id: Callable[[str], Any], internal: bool,
                listener: str = "PLAINTEXT", version: int = 12) -> dict[str, Any]:
    parts = view.assignments.get(topic)
    if parts is None:
        return {"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "name": topic, "topic_id": topic_id(topic),
                "is_internal": internal, "partitions": []}
    out = []
    for p in sorted(parts):
        replicas = list(parts[p])
        st = view.states.get((topic, p))
        leader = view.leader(topic, p)
        error = ErrorCode.LEADER_NOT_AVAILABLE if leader == NO_LEADER else 0
        if leader != NO_LEADER and view.brokers[leader].endpoint(listener) is None:
            leader, error = NO_LEADER, (ErrorCode.LISTENER_NOT_FOUND if version >= 6 else
                                        ErrorCode.LEADER_NOT_AVAILABLE)
        out.append({
            "error_code": error,
            "partition_index": p, "leader_id": leader,
            "leader_epoch": st.leader_epoch if st is not None else -1,
            "replica_nodes": replicas, "isr_nodes": list(st.isr) if st is not None else [],
            "offline_replicas": [r for r in replicas if r not in view.brokers],
        })
    return {"error_code": 0, "name": topic, "topic_id": topic_id(topic), "is_internal": internal,
            "partitions": out}
