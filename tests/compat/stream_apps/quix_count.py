"""A Quix Streams count app in exactly-once mode, run by tests/compat/test_quix_exactly_once.py with the quix venv.

Rules:
- Usage: quix_count.py BOOTSTRAP INPUT OUTPUT GROUP STATE_DIR STALL_AT. Input values are JSON ``{"key": K, ...}``;
  for each one the app adds 1 to K's count in a RocksDB state store backed by a changelog topic and writes
  ``{"key", "count", "partition", "offset"}`` (the input record's place) to OUTPUT: with exactly-once, every
  input record has exactly one output record, and K's outputs count 1, 2, 3, ... with no gap and no repeat.
- Checkpoints every 25 records (or 0.5 s): each is one Kafka transaction holding the outputs, the changelog
  records and the input offsets.
- STALL_AT > 0: the first checkpoint from the STALL_AT-th on that comes after every input partition (PARTITIONS,
  7th argument, default 4) had records in a committed checkpoint stops right before its commit_transaction
  (outputs, changelog records and offsets sent, the transaction still open), prints ``stalled`` and sleeps: the
  test SIGKILLs the process then, so the killed worker leaves an open transaction behind on top of committed
  records of every changelog partition (a test-only hook on quixstreams' Producer wrapper). Waiting for every
  partition: on a loaded machine one partition's first records can come after the STALL_AT-th checkpoint.
- transaction.timeout.ms 5000 (the coordinator aborts the killed worker's transaction after it) and
  session.timeout.ms 6000 (the group drops the killed member after it), so the test stays short.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from quixstreams import Application, message_context
from quixstreams.kafka.producer import Producer

SEEN: set[int] = set()  # input partitions with records counted so far (count() adds to it)


def _stall_at(n: int, partitions: int) -> None:
    original = Producer.commit_transaction
    calls = 0
    committed: set[int] = set()  # input partitions with records in a committed checkpoint

    def commit_transaction(self: Producer, *args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls >= n and len(committed) >= partitions:
            self.flush()  # every output and changelog record of the open transaction is on the broker
            print("stalled", flush=True)
            while True:
                time.sleep(60)
        seen = set(SEEN)  # what this checkpoint holds is committed once the call returns
        original(self, *args, **kwargs)
        committed.update(seen)

    Producer.commit_transaction = commit_transaction  # type: ignore[method-assign]


def main() -> None:
    bootstrap, input_name, output_name, group, state_dir, stall_at = sys.argv[1:7]
    partitions = int(sys.argv[7]) if len(sys.argv) > 7 else 4
    if int(stall_at) > 0:
        _stall_at(int(stall_at), partitions)
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        state_dir=state_dir,
        commit_every=25,
        commit_interval=0.5,
        producer_extra_config={"transaction.timeout.ms": 5000},
        # small fetches (the input comes in batches of 10): the partitions' records interleave, so that every
        # changelog partition gets committed and then aborted records
        consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                               "max.partition.fetch.bytes": 1024},
        loglevel="INFO",
    )
    source = app.topic(input_name, value_deserializer="json")
    sink = app.topic(output_name, value_serializer="json")

    def count(value: dict[str, Any], state: Any) -> dict[str, Any]:
        n = state.get("count", 0) + 1
        state.set("count", n)
        ctx = message_context()
        SEEN.add(ctx.partition)
        return {"key": value["key"], "count": n, "partition": ctx.partition, "offset": ctx.offset}

    sdf = app.dataframe(source)
    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(sink)
    print("running", flush=True)
    app.run()


if __name__ == "__main__":
    main()
