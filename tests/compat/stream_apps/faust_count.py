"""A Faust count app in exactly-once mode, run by tests/compat/test_faust_exactly_once.py with the faust venv.

Rules:
- Usage: faust_count.py BOOTSTRAP INPUT OUTPUT APP_ID DATA_DIR. Input records are keyed, values JSON
  ``{"key": K, ...}``; for each one the app adds 1 to K in a table (in memory, backed by its changelog topic
  ``<APP_ID>-counts-changelog``) and sends ``{"key", "count", "partition", "offset"}`` (the input record's place)
  to OUTPUT keyed by K: with exactly-once, one output per input record, and K's outputs count 1, 2, 3, ...
- ``processing_guarantee="exactly_once"``: Faust keeps one transactional producer per assigned input partition
  (transactional.id ``<APP_ID>-<group>-<partition>``), reads read_committed and commits offsets in the
  transactions (aiokafka underneath). The table's changelog goes through those transactions; the sends to OUTPUT
  do not (Faust 0.15.3 picks no transactional id for a topic it does not consume: its plain producer sends them).
- Commits every 0.5 s; session timeout 6 s; no web server; each worker its own DATA_DIR.
- Prints ``running`` when the worker starts and ``faust_count assigned=P,...`` (its input partitions) after each
  assignment, for the test's waits (Faust logs what a worker prints, as WARNING lines).
"""

from __future__ import annotations

import sys
from typing import Any

import faust
from faust.types import TP


def main() -> None:
    bootstrap, input_name, output_name, app_id, data_dir = sys.argv[1:6]
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        processing_guarantee="exactly_once",
        store="memory://",
        datadir=data_dir,
        web_enabled=False,
        topic_partitions=4,
        topic_replication_factor=1,
        broker_commit_interval=0.5,
        broker_session_timeout=6.0,
        broker_heartbeat_interval=0.5,
        consumer_auto_offset_reset="earliest",
        table_standby_replicas=0,
    )
    source = app.topic(input_name, key_type=str, value_serializer="json", partitions=4)
    sink = app.topic(output_name, key_type=str, value_serializer="json", partitions=4)
    counts = app.Table("counts", default=int, partitions=4, key_type=str, value_type=int)

    @app.agent(source)
    async def count(stream: Any) -> None:
        async for event in stream.events():
            key = event.key
            counts[key] += 1
            await sink.send(key=key, value={"key": key, "count": counts[key],
                                            "partition": event.message.partition, "offset": event.message.offset})

    @app.on_partitions_assigned.connect
    async def on_assigned(sender: Any, assigned: set[TP], **kwargs: Any) -> None:
        mine = sorted(tp.partition for tp in assigned if tp.topic == input_name)
        print("faust_count assigned=" + ",".join(map(str, mine)), flush=True)

    @app.task
    async def started() -> None:
        print("running", flush=True)

    sys.argv = ["faust_count", "worker", "--loglevel", "info", "--without-web"]
    app.main()


if __name__ == "__main__":
    main()
