"""A consumer tailing ``__consumer_offsets`` at full speed: the reader of bench_coordinator's ``tail`` part.

Run as ``python -m tests.bench.bench_offsets_tail --port P [--partitions 50] [--seconds S] [--from-beginning]``.
One connection sends Fetch v12 for every offsets partition, from each partition's log end (ListOffsets
latest; with ``--from-beginning``, from offset 0: it first reads the whole history, then tails), with
``max_wait_ms`` 500 and ``min_bytes`` 1 (a consumer's defaults), back to back: the next fetch goes out as
soon as the answer is in. It follows each
partition by the batch headers it received (the next offset is the last batch's last offset + 1) and does
not decode records, so it costs the machine little beyond the fetches themselves: what slows the commits
is the server's serving of them. It stops after ``--seconds`` or on SIGTERM, then prints one line
``TAILED <json>`` (fetches, batches, bytes, the offsets reached).
Without ``--port`` it only says that it is a helper (``make bench`` runs every bench_*.py module).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import struct
import sys
import time

from protocol import codec
from protocol.record_batch import parse_header, split_batches

FETCH, VERSION, LIST_OFFSETS = 1, 12, 2
OFFSETS = "__consumer_offsets"


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("server closed the connection")
        buf += chunk
    return bytes(buf)


def _ask(s: socket.socket, api_key: int, version: int, corr: int, body: dict) -> dict:
    s.sendall(codec.encode_request(api_key, version, corr, "offsets-tail", body))
    n = struct.unpack(">i", _recv_exact(s, 4))[0]
    return codec.decode_response(api_key, version, _recv_exact(s, n))[1]


def tail(port: int, partitions: int, seconds: float, from_beginning: bool) -> dict[str, object]:
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    offsets = [0] * partitions
    fetches = batches = size = 0
    end = time.monotonic() + seconds
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        corr = 0
        if not from_beginning:
            resp = _ask(s, LIST_OFFSETS, 7, 0, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": OFFSETS, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                                 for p in range(partitions)]}]})
            for p in resp["topics"][0]["partitions"]:
                assert p["error_code"] == 0, p
                offsets[p["partition_index"]] = p["offset"]
        started_at = sum(offsets)
        while not stop[0] and time.monotonic() < end:
            corr += 1
            body = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 50 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": OFFSETS, "partitions": [
                        {"partition": p, "fetch_offset": offsets[p], "partition_max_bytes": 1 << 20}
                        for p in range(partitions)]}],
                    "forgotten_topics_data": [], "rack_id": ""}
            resp = _ask(s, FETCH, VERSION, corr, body)
            fetches += 1
            for t in resp["responses"]:
                for p in t["partitions"]:
                    if p["error_code"]:
                        raise RuntimeError(f"fetch error {p['error_code']} on partition {p['partition_index']}")
                    data = p["records"] or b""
                    if not data:
                        continue
                    found, _ = split_batches(data)
                    for batch in found:
                        h = parse_header(batch)
                        offsets[p["partition_index"]] = h.base_offset + h.last_offset_delta + 1
                    batches += len(found)
                    size += len(data)
    return {"fetches": fetches, "batches": batches, "bytes": size, "records_read": sum(offsets) - started_at,
            "cpu_s": round(time.process_time(), 2)}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench_offsets_tail")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--partitions", type=int, default=50)
    p.add_argument("--seconds", type=float, default=600.0, help="stops by itself after this long (a bound)")
    p.add_argument("--from-beginning", action="store_true", help="read the whole history first, then tail")
    args = p.parse_args(argv)
    if not args.port:
        print("helper of tests.bench.bench_coordinator (--only tail)")
        return 0
    print("TAILED " + json.dumps(tail(args.port, args.partitions, args.seconds, args.from_beginning)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
