"""Fetch (1): consumers (and, in cluster mode, followers) read record batches from partitions.

Rules:
- We serve v4-17, Kafka 3.9's range without v0-3 (they need the pre-2017 message formats; DESIGN.md).
  v12 is the first flexible version.
- v13+ name topics by id (``topic_id``, request and response, forgotten topics too) instead of by name; the
  runtime resolves them (``coordinator.runtime.topic_ids``): an id no topic has is UNKNOWN_TOPIC_ID.
- v15+ move the follower's ``replica_id`` into the tagged ``replica_state`` (tag 1, with ``replica_epoch``);
  the runtime copies it back to ``replica_id`` so handlers read one field at every version. v17 adds the
  follower's ``replica_directory_id`` (partition tag 0), which we do not use.
- v12 tagged fields: request ``cluster_id`` (tag 0); response partition ``diverging_epoch`` (0),
  ``current_leader`` (1), ``snapshot_id`` (2); v16+ response ``node_endpoints`` (tag 0, written only when it
  has entries: we leave it empty, as Kafka does without NOT_LEADER_OR_FOLLOWER answers to explain).
- ``records`` is nullable bytes on the wire, but Kafka never writes null: every partition carries records,
  empty (``MemoryRecords.EMPTY``) when there is nothing to send, errors included. librdkafka rejects a null
  (``invalid MessageSetSize -1``) and never resets an out-of-range offset (issue #26); so do we.
- ``aborted_transactions``: null (Kafka writes null for read_uncommitted; we have no transactions, and
  read_committed clients accept null, see PROTOCOL-NOTES.md). ``preferred_read_replica`` -1,
  ``last_stable_offset`` = high watermark; -1 (with log start -1) for an unknown partition, as Kafka.
"""

from typing import Any

from protocol.schema import ApiSchema, arr, f, struct

SCHEMA = ApiSchema(
    key=1,
    name="Fetch",
    valid="4-17",
    flexible="12+",
    request=(
        f("cluster_id", "string", "12+", nullable="12+", tag=0, tagged="12+"),
        f("replica_id", "int32", "0-14", default=-1),
        struct("replica_state", "15+",
               f("replica_id", "int32", "15+", default=-1),
               f("replica_epoch", "int64", "15+", default=-1),
               tag=1, tagged="15+"),
        f("max_wait_ms", "int32"),
        f("min_bytes", "int32"),
        f("max_bytes", "int32", "3+", default=0x7FFFFFFF),
        f("isolation_level", "int8", "4+"),
        f("session_id", "int32", "7+"),
        f("session_epoch", "int32", "7+", default=-1),
        arr("topics", "0+",
            f("topic", "string", "0-12"),
            f("topic_id", "uuid", "13+"),
            arr("partitions", "0+",
                f("partition", "int32"),
                f("current_leader_epoch", "int32", "9+", default=-1),
                f("fetch_offset", "int64"),
                f("last_fetched_epoch", "int32", "12+", default=-1),
                f("log_start_offset", "int64", "5+", default=-1),
                f("partition_max_bytes", "int32"),
                f("replica_directory_id", "uuid", "17+", tag=0, tagged="17+"))),
        arr("forgotten_topics_data", "7+",
            f("topic", "string", "7-12"),
            f("topic_id", "uuid", "13+"),
            f("partitions", "[]int32", "7+")),
        f("rack_id", "string", "11+"),
    ),
    response=(
        f("throttle_time_ms", "int32", "1+"),
        f("error_code", "int16", "7+"),
        f("session_id", "int32", "7+"),
        arr("responses", "0+",
            f("topic", "string", "0-12"),
            f("topic_id", "uuid", "13+"),
            arr("partitions", "0+",
                f("partition_index", "int32"),
                f("error_code", "int16"),
                f("high_watermark", "int64"),
                f("last_stable_offset", "int64", "4+", default=-1),
                f("log_start_offset", "int64", "5+", default=-1),
                struct("diverging_epoch", "12+",
                       f("epoch", "int32", "12+", default=-1),
                       f("end_offset", "int64", "12+", default=-1),
                       tag=0, tagged="12+"),
                struct("current_leader", "12+",
                       f("leader_id", "int32", "12+", default=-1),
                       f("leader_epoch", "int32", "12+", default=-1),
                       tag=1, tagged="12+"),
                struct("snapshot_id", "12+",
                       f("end_offset", "int64", default=-1),
                       f("epoch", "int32", default=-1),
                       tag=2, tagged="12+"),
                arr("aborted_transactions", "4+",
                    f("producer_id", "int64", "4+"),
                    f("first_offset", "int64", "4+"),
                    nullable="4+"),
                f("preferred_read_replica", "int32", "11+", default=-1),
                f("records", "records", nullable="0+"))),
        arr("node_endpoints", "16+",
            f("node_id", "int32", "16+"),
            f("host", "string", "16+"),
            f("port", "int32", "16+"),
            f("rack", "string", "16+", nullable="16+", default=None),
            tag=0, tagged="16+"),
    ),
)


def empty_partition(index: int) -> dict[str, Any]:
    """A response partition with nothing in it yet (no error, offsets -1, empty records: never null), for the
    consumer and follower Fetch handlers to fill in."""
    return {"partition_index": index, "error_code": 0, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}
