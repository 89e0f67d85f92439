"""A RetryingConsumer in its own process, for the SIGKILL test.

usage: retry_child.py BOOTSTRAP GROUP TOPIC LOGFILE MODE

Handler: value "i" fails its first attempt when i % 3 == 0 and every attempt when i == 7; each attempt is
appended to LOGFILE as "value retry_number ok|fail". MODE "kill": after the first acknowledged copy (before
its offset is committed) print "REPUBLISHED topic partition offset value" and hang until killed. MODE "run":
poll until SIGTERM, then close.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from client.fetcher import ConsumerRecord
from client.retry import RetryingConsumer, RetryPolicy
from client.retry_policy import Route


def main() -> None:
    bootstrap, group, topic, logfile, mode = sys.argv[1:6]
    fd = os.open(logfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def handler(rec: ConsumerRecord) -> None:
        assert rec.value is not None
        i = int(rec.value)
        n = int(dict(rec.headers).get("retry_number") or b"0")
        fail = i == 7 or (i % 3 == 0 and n == 0)
        os.write(fd, f"{i} {n} {'fail' if fail else 'ok'}\n".encode())
        if fail:
            raise RuntimeError(f"record {i} fails")

    def republished(rec: ConsumerRecord, route: Route) -> None:
        if mode == "kill":
            print(f"REPUBLISHED {rec.topic} {rec.partition} {rec.offset} {rec.value.decode()}", flush=True)
            time.sleep(120)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    rc = RetryingConsumer(bootstrap_servers=bootstrap, group_id=group, topics=[topic], handler=handler,
                          policy=RetryPolicy.parse("1s,1s"), on_republished=republished,
                          session_timeout_ms=3000, heartbeat_interval_ms=300, fetch_max_wait_ms=100)
    print("STARTED", flush=True)
    try:
        rc.run(stop)
    finally:
        rc.close()


if __name__ == "__main__":
    main()
