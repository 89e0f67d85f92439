"""A consumer in its own process (for SIGKILL tests): prints its assignment as a JSON line on each change.

usage: member_child.py BOOTSTRAP GROUP TOPIC SESSION_TIMEOUT_MS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from client.consumer import Consumer


def main() -> None:
    bootstrap, group, topic, session = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    consumer = Consumer(bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=session,
                        heartbeat_interval_ms=max(100, session // 10), max_poll_interval_ms=30000)
    consumer.subscribe([topic])
    last = None
    while True:
        consumer.poll(100)
        now = sorted(p for _, p in consumer.assignment())
        if now != last and consumer.member.generation_if_stable() is not None:
            print(json.dumps({"member_id": consumer.generation().member_id, "partitions": now}), flush=True)
            last = now


if __name__ == "__main__":
    main()
