"""TransactionsAdmin: the Admin API calls behind ``groupcoord transactions`` (Kafka's ``kafka-transactions.sh``).

Rules (Kafka 3.9's ``KafkaAdminClient`` and ``TransactionsCommand``, over an ``AdminClient``'s connections):
- ``list_transactions`` sends ListTransactions (66) to every node and keeps each node's listings apart (the node
  is the COORDINATOR column); a node's top-level error raises. ``duration_filter_ms`` needs v1.
- ``describe_transactions`` finds each id's transaction coordinator (FindCoordinator key type 1) and sends it
  DescribeTransactions (65). A per-id error (TRANSACTIONAL_ID_NOT_FOUND, ...) is returned in the result.
- Requests to a transaction coordinator retry, as the group requests of ``AdminClient`` do:
  NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE look the coordinator up again, COORDINATOR_LOAD_IN_PROGRESS
  retries the same node, a lost connection looks again; after ``retry_backoff_ms``, until
  ``request_timeout_ms`` has passed. A refused lookup (not retriable) raises at once.
- ``describe_producers`` sends DescribeProducers (61) to each partition's leader (or to ``broker_id``), at most
  ``BATCH`` partitions a request; per-partition errors come back in the result.
- ``abort_transaction`` writes an ABORT marker with WriteTxnMarkers (27) at the partition's leader for the
  given (producer id, producer epoch, coordinator epoch); a negative coordinator epoch becomes 0, as Kafka's
  tool does. ``abort_spec`` finds those from DescribeProducers: the producer whose open transaction starts at
  the given offset, else KafkaError. A partition error of the marker raises.
- ``find_hanging``: the open transactions (DescribeProducers) older than ``max_timeout_ms`` (now minus the
  producer's last timestamp) whose producer id no coordinator lists (ListTransactions by producer id), whose
  transactional id is not found (DescribeTransactions), or whose transaction does not include that partition.
  Every topic but the internal ones when no topic is given; only partitions led by ``broker_id`` when given.
  A DescribeProducers error on any partition raises (Kafka's tool exits).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from client.admin import AdminClient
from client.cluster import Node
from client.consumer_protocol import TopicPartition
from client.errors import KafkaConnectionError, KafkaError, RequestTimedOutError, check, error_for
from protocol.errors import ErrorCode, error_name

DESCRIBE_PRODUCERS, WRITE_TXN_MARKERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 27, 65, 66
TRANSACTION_KEY = 1  # FindCoordinator key type of a transactional id
BATCH = 500  # partitions a DescribeProducers request (Kafka's MAX_BATCH_SIZE)
_RETRY_SAME = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
_RELOOKUP = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None  # None: no transaction started (Kafka's -1)
    partitions: tuple[TopicPartition, ...]
    error_code: int = 0

    @property
    def error(self) -> str | None:
        return error_name(self.error_code) if self.error_code else None


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One active producer of a partition (DescribeProducers); None for what the partition does not know."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None
    txn_start_offset: int | None


@dataclass(frozen=True, slots=True)
class PartitionProducers:
    partition: TopicPartition
    producers: tuple[ProducerState, ...]
    error_code: int = 0
    error_message: str | None = None

    @property
    def error(self) -> str | None:
        if not self.error_code:
            return None
        return error_name(self.error_code) + (f": {self.error_message}" if self.error_message else "")


@dataclass(frozen=True, slots=True)
class AbortSpec:
    partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """An open transaction at one partition (a find-hanging candidate)."""

    partition: TopicPartition
    producer: ProducerState


class TransactionsAdmin:
    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin
        self.cluster = admin.cluster
        self._coordinators: dict[str, Node] = {}

    # ------------------------------------------------------------------ coordinators
    def list_transactions(self, *, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_filter_ms: int | None = None) -> dict[int, list[TransactionListing]]:
        """node id -> the transactions that node coordinates (module rules)."""
        body = {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                "duration_filter": -1 if duration_filter_ms is None else duration_filter_ms}
        self.cluster.refresh_metadata([])
        out: dict[int, list[TransactionListing]] = {}
        for node_id in sorted(self.cluster.nodes):
            conn = self.cluster.connection(node_id)
            if duration_filter_ms is not None and conn.version_for(LIST_TRANSACTIONS) < 1:
                raise KafkaError(f"node {node_id} cannot filter transactions by duration (ListTransactions v0)")
            deadline = time.monotonic() + self.admin.request_timeout_ms / 1000
            while True:
                _, resp = conn.send(LIST_TRANSACTIONS, body)
                code = resp["error_code"]
                if code not in _RETRY_SAME or time.monotonic() >= deadline:
                    break
                time.sleep(self.admin.retry_backoff_ms / 1000)
            check(code, f"ListTransactions at node {node_id}")
            out[node_id] = [TransactionListing(t["transactional_id"], t["producer_id"], t["transaction_state"])
                            for t in resp["transaction_states"]]
        return out

    def describe_transactions(self, txn_ids: Iterable[str]) -> list[TransactionDescription]:
        out: list[TransactionDescription] = []
        for txn_id in txn_ids:
            _, resp, node = self._txn_request(
                txn_id, DESCRIBE_TRANSACTIONS, {"transactional_ids": [txn_id]},
                lambda r: r["transaction_states"][0]["error_code"] if r["transaction_states"] else 0)
            entry = next((s for s in resp["transaction_states"] if s["transactional_id"] == txn_id), None)
            if entry is None:
                raise KafkaError(f"DescribeTransactions answered nothing for {txn_id!r}")
            parts = tuple(sorted(TopicPartition(t["topic"], p) for t in entry["topics"] or () for p in t["partitions"]))
            start = entry["transaction_start_time_ms"]
            out.append(TransactionDescription(
                txn_id, node.node_id, entry["transaction_state"], entry["producer_id"], entry["producer_epoch"],
                entry["transaction_timeout_ms"], start if start >= 0 else None, parts, entry["error_code"]))
        return out

    def _txn_request(self, txn_id: str, api_key: int, body: Any, error_of: Callable[[dict[str, Any]], int]
                     ) -> tuple[int, dict[str, Any], Node]:
        """Send to the transactional id's coordinator, retrying coordinator moves and loading (module rules)."""
        deadline = time.monotonic() + self.admin.request_timeout_ms / 1000
        while True:
            node = self._coordinator(txn_id, deadline)
            try:
                version, resp = self.cluster.coordinator_connection(node).send(api_key, body)
            except (KafkaConnectionError, RequestTimedOutError):
                self._coordinators.pop(txn_id, None)
                if time.monotonic() >= deadline:
                    raise
                time.sleep(self.admin.retry_backoff_ms / 1000)
                continue
            code = error_of(resp)
            if code not in _RETRY_SAME and code not in _RELOOKUP:
                return version, resp, node
            if code in _RELOOKUP:
                self._coordinators.pop(txn_id, None)
            if time.monotonic() >= deadline:
                return version, resp, node
            time.sleep(self.admin.retry_backoff_ms / 1000)

    def _coordinator(self, txn_id: str, deadline: float) -> Node:
        node = self._coordinators.get(txn_id)
        while node is None:
            try:
                node = self.cluster.find_coordinator(txn_id, TRANSACTION_KEY)
            except KafkaError as e:
                if not e.retriable or time.monotonic() >= deadline:
                    raise
                time.sleep(self.admin.retry_backoff_ms / 1000)
        self._coordinators[txn_id] = node
        return node

    # ------------------------------------------------------------------ partitions
    def describe_producers(self, partitions: Iterable[TopicPartition], *, broker_id: int | None = None
                           ) -> dict[TopicPartition, PartitionProducers]:
        tps = [TopicPartition(*tp) for tp in partitions]
        out: dict[TopicPartition, PartitionProducers] = {}
        by_node: dict[int, list[TopicPartition]] = {}
        if broker_id is None:
            self.cluster.refresh_metadata(sorted({tp.topic for tp in tps}))
        else:
            self.cluster.refresh_metadata([])
            if broker_id not in self.cluster.nodes:
                raise KafkaError(f"no broker with id {broker_id}")
        for tp in tps:
            node = broker_id if broker_id is not None else self.cluster.leader_for(tp.topic, tp.partition)
            if node is None:
                out[tp] = PartitionProducers(tp, (), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no leader known")
                continue
            by_node.setdefault(node, []).append(tp)
        for node, parts in sorted(by_node.items()):
            for i in range(0, len(parts), BATCH):
                self._describe_producers_at(node, parts[i:i + BATCH], out)
        return out

    def _describe_producers_at(self, node: int, tps: Sequence[TopicPartition],
                               out: dict[TopicPartition, PartitionProducers]) -> None:
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = {"topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}
        _, resp = self.cluster.connection(node).send(DESCRIBE_PRODUCERS, body)
        for t in resp["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                producers = tuple(ProducerState(
                    a["producer_id"], a["producer_epoch"], a["last_sequence"], a["last_timestamp"],
                    a["coordinator_epoch"] if a["coordinator_epoch"] >= 0 else None,
                    a["current_txn_start_offset"] if a["current_txn_start_offset"] >= 0 else None)
                    for a in p["active_producers"])
                out[tp] = PartitionProducers(tp, producers, p["error_code"], p["error_message"])
        for tp in tps:
            if tp not in out:
                out[tp] = PartitionProducers(tp, (), ErrorCode.UNKNOWN_SERVER_ERROR, f"node {node} did not answer it")

    def abort_spec(self, tp: TopicPartition, start_offset: int) -> AbortSpec:
        """The producer whose open transaction at ``tp`` starts at ``start_offset`` (Kafka's buildAbortSpec)."""
        result = self.describe_producers([tp])[tp]
        if result.error_code:
            raise error_for(result.error_code, f"describing the producers of {_tp(tp)}: {result.error}")
        for p in result.producers:
            if p.txn_start_offset == start_offset:
                return AbortSpec(tp, p.producer_id, p.producer_epoch, p.coordinator_epoch or 0)
        raise KafkaError(f"could not find any open transaction starting at offset {start_offset} on partition "
                         f"{_tp(tp)}")

    def abort_transaction(self, spec: AbortSpec) -> None:
        """Write an ABORT marker for ``spec`` at its partition's leader; a partition error raises."""
        tp = spec.partition
        self.cluster.refresh_metadata([tp.topic])
        leader = self.cluster.leader_for(tp.topic, tp.partition)
        if leader is None:
            raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, _tp(tp))
        body = {"markers": [{"producer_id": spec.producer_id, "producer_epoch": spec.producer_epoch,
                             "transaction_result": False, "coordinator_epoch": max(0, spec.coordinator_epoch),
                             "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}]}]}
        _, resp = self.cluster.connection(leader).send(WRITE_TXN_MARKERS, body)
        codes = [p["error_code"] for m in resp["markers"] if m["producer_id"] == spec.producer_id
                 for t in m["topics"] if t["name"] == tp.topic
                 for p in t["partitions"] if p["partition_index"] == tp.partition]
        if not codes:
            raise KafkaError(f"WriteTxnMarkers answered nothing for {_tp(tp)}")
        check(codes[0], f"aborting producer {spec.producer_id} epoch {spec.producer_epoch} at {_tp(tp)}")

    # ------------------------------------------------------------------ hanging transactions
    def partitions_to_search(self, topic: str | None, partition: int | None, broker_id: int | None
                             ) -> list[TopicPartition]:
        if topic is not None and partition is not None:
            return [TopicPartition(topic, partition)]
        if topic is not None:
            self.cluster.refresh_metadata([topic])
            if topic not in self.cluster.topics:
                raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, topic)
            names = [topic]
        else:
            self.cluster.refresh_metadata(None)
            names = sorted(n for n, t in self.cluster.topics.items() if not t.is_internal and not n.startswith("__"))
        return [TopicPartition(n, p.partition) for n in names for p in self.cluster.topics[n].partitions
                if broker_id is None or p.leader == broker_id]

    def find_hanging(self, partitions: Sequence[TopicPartition], *, broker_id: int | None, max_timeout_ms: int,
                     now_ms: int | None = None) -> list[OpenTransaction]:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        candidates: list[OpenTransaction] = []
        for tp, result in sorted(self.describe_producers(partitions, broker_id=broker_id).items()):
            if result.error_code:
                raise error_for(result.error_code, f"describing the producers of {_tp(tp)}: {result.error}")
            candidates += [OpenTransaction(tp, p) for p in result.producers
                           if p.txn_start_offset is not None and now - p.last_timestamp > max_timeout_ms]
        if not candidates:
            return []
        pids = sorted({c.producer.producer_id for c in candidates})
        txn_ids: dict[int, str] = {}
        for listings in self.list_transactions(producer_ids=pids).values():
            txn_ids.update((t.producer_id, t.transactional_id) for t in listings if t.producer_id in pids)
        descriptions: dict[str, TransactionDescription | None] = {}
        for d in self.describe_transactions(sorted(set(txn_ids.values()))):
            if d.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                descriptions[d.transactional_id] = None
            elif d.error_code:
                raise error_for(d.error_code, f"describing transactional id {d.transactional_id!r}")
            else:
                descriptions[d.transactional_id] = d
        hanging = []
        for c in candidates:
            txn_id = txn_ids.get(c.producer.producer_id)
            d = None if txn_id is None else descriptions.get(txn_id)
            if d is None or c.partition not in d.partitions:
                hanging.append(c)
        return hanging


def _tp(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


__all__ = ["AbortSpec", "OpenTransaction", "PartitionProducers", "ProducerState", "TransactionDescription",
           "TransactionListing", "TransactionsAdmin"]
