"""Cluster-mode Metadata v12+ by topic id (Broker._cluster_metadata), with a ClusterView and no network: a
known id is answered as its topic (leader, replicas) after the names asked, never auto-created; an unknown
id is UNKNOWN_TOPIC_ID with a null name, last; a request by name alone is unchanged (auto-creation allowed)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from coordinator.cluster.metadata import topic_entry
from coordinator.cluster.state import BrokerInfo, ClusterView, PartitionState
from coordinator.runtime.broker import Broker
from coordinator.runtime.topics import topic_id
from protocol.errors import ErrorCode


def metadata(body: dict[str, Any], version: int = 12) -> tuple[dict[str, Any], list[tuple[str, bool]]]:
    view = ClusterView(brokers={1: BrokerInfo(1, "h1", 9092), 2: BrokerInfo(2, "h2", 9092)}, controller_id=1,
                       assignments={"clicks": {0: (1, 2)}, "views": {0: (2, 1)}},
                       states={("clicks", 0): PartitionState(1, 3, (1, 2), 1),
                               ("views", 0): PartitionState(2, 1, (2, 1), 1)})
    asked: list[tuple[str, bool]] = []

    def metadata_entry(v: ClusterView, name: str, allow: bool, listener: str, version: int) -> dict[str, Any]:
        asked.append((name, allow))
        if name in v.assignments:
            return topic_entry(v, name, topic_id, False, listener, version)
        return {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}

    by_id = {topic_id(n): n for n in view.assignments}
    fake: Any = SimpleNamespace(cluster=SimpleNamespace(view=view, request_offsets_topic=lambda: None),
                                cluster_topics=SimpleNamespace(metadata_entry=metadata_entry),
                                config={"cluster.id": "c1"}, _topic_name=by_id.get)
    fake._topics_by_id = lambda wanted, v: Broker._topics_by_id(fake, wanted, v)
    answers: list[dict[str, Any]] = []
    slot = SimpleNamespace(conn=SimpleNamespace(listener="PLAINTEXT"), complete=answers.append)
    Broker._cluster_metadata(fake, SimpleNamespace(body=body, version=version), slot)  # type: ignore[arg-type]
    [answer] = answers
    return answer, asked


def test_topics_by_id_in_cluster_mode() -> None:
    missing = uuid.uuid4()
    answer, asked = metadata({"topics": [{"name": None, "topic_id": topic_id("views")},
                                         {"name": None, "topic_id": missing}],
                              "allow_auto_topic_creation": True})
    views, unknown = answer["topics"]
    assert views["name"] == "views" and views["topic_id"] == topic_id("views") and views["error_code"] == 0
    assert [(p["leader_id"], p["replica_nodes"]) for p in views["partitions"]] == [(2, [2, 1])]
    assert unknown == {"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": missing,
                       "is_internal": False, "partitions": []}
    assert asked == [("views", False)]  # never auto-created when asked by id


def test_names_then_ids_once_each() -> None:
    answer, _ = metadata({"topics": [{"name": "clicks", "topic_id": None},
                                     {"name": None, "topic_id": topic_id("clicks")},
                                     {"name": None, "topic_id": topic_id("views")}],
                          "allow_auto_topic_creation": False})
    assert [t["name"] for t in answer["topics"]] == ["clicks", "views"]


def test_by_name_alone_is_unchanged_and_before_v12_ids_are_ignored() -> None:
    answer, asked = metadata({"topics": [{"name": "nope", "topic_id": None}], "allow_auto_topic_creation": True})
    assert asked == [("nope", True)] and answer["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    answer, asked = metadata({"topics": [{"name": None, "topic_id": topic_id("views")}],
                              "allow_auto_topic_creation": True}, version=11)
    assert answer["topics"] == [] and asked == []
