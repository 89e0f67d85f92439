"""Client-neutral helpers for the compatibility tests: our own codec reads the server's view of a run.

Rules:
- Every check of what a third-party client did goes through our codec over a fresh socket (Metadata,
  ListOffsets, OffsetFetch, DescribeGroups, Fetch), never through the client under test, so a client bug
  cannot hide itself.
- ``Member`` wraps one consumer subprocess; it prints one line per record, ``R <partition> <offset> <key>``,
  which a reader thread collects. ``kill()`` is SIGKILL (no LeaveGroup, no commit); ``stop()`` asks for a
  clean shutdown with ``signal`` and waits.
- ``run_group_scenario`` is the story every client test tells: three members join an empty 4-partition
  topic, the first 500 keyed records are produced, one member is killed with SIGKILL once it has consumed
  some, the other 500 are produced, the survivors take over the dead member's partitions and finish, and
  after clean shutdowns the committed offsets equal the log end offsets and the group is Empty.
"""

from __future__ import annotations

import itertools
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO

import rdkafka_guard  # type: ignore[import-not-found]  # tests/, on sys.path
from server_process import read_frame  # type: ignore[import-not-found]  # tests/integration, on sys.path

from protocol import codec
from protocol.record_batch import Compression, iter_records, parse_header, split_batches

PARTITIONS = 4
RECORDS = 1000
_corr = itertools.count(1)


def keys(lo: int, hi: int) -> list[str]:
    return [f"key-{i:04d}" for i in range(lo, hi)]


# ------------------------------------------------------------------ raw requests through our codec
def call(port: int, api_key: int, version: int, body: dict, timeout: float = 10.0) -> dict:
    corr = next(_corr)
    frame = codec.encode_request(api_key, version, corr, "compat-check", body)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(frame)
        payload = read_frame(s)
    if payload is None:
        raise ConnectionError("server closed the connection")
    got, resp = codec.decode_response(api_key, version, payload)
    assert got == corr
    return resp


def partition_count(port: int, topic: str) -> int:
    body = call(port, 3, 4, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    (t,) = body["topics"]
    return len(t["partitions"]) if t["error_code"] == 0 else 0


def log_end_offsets(port: int, topic: str) -> dict[int, int]:
    parts = [{"partition_index": p, "timestamp": -1} for p in range(PARTITIONS)]
    body = call(port, 2, 1, {"replica_id": -1, "topics": [{"name": topic, "partitions": parts}]})
    out = {}
    for p in body["topics"][0]["partitions"]:
        assert p["error_code"] == 0, p
        out[p["partition_index"]] = p["offset"]
    return out


def committed_offsets(port: int, group: str, topic: str) -> dict[int, int]:
    body = call(port, 9, 1, {"group_id": group,
                              "topics": [{"name": topic, "partition_indexes": list(range(PARTITIONS))}]})
    return {p["partition_index"]: p["committed_offset"] for p in body["topics"][0]["partitions"]}


def describe_group(port: int, group: str) -> dict:
    return call(port, 15, 0, {"groups": [group]})["groups"][0]


def stored_records(port: int, topic: str) -> tuple[list[str], set[int]]:
    """All keys stored in the topic (every partition read from 0) and the codecs of the stored batches."""
    found: list[str] = []
    codecs: set[int] = set()
    for p in range(PARTITIONS):
        offset = 0
        while True:
            req = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 24,
                   "isolation_level": 1,
                   "topics": [{"topic": topic, "partitions": [{"partition": p, "fetch_offset": offset,
                                                              "partition_max_bytes": 1 << 24}]}]}
            part = call(port, 1, 4, req)["responses"][0]["partitions"][0]
            assert part["error_code"] == 0, part
            data = part["records"] or b""
            if not data:
                break
            batches, _ = split_batches(data)
            for b in batches:
                header = parse_header(b)
                codecs.add(header.compression)
                offset = header.next_offset
            found += [r.key.decode() for r in iter_records(data)]
    return found, codecs


# ------------------------------------------------------------------ consumer subprocesses
@dataclass
class Member:
    name: str
    argv: Sequence[str]
    stop_signal: int = signal.SIGTERM
    cwd: str | None = None
    records: list[tuple[int, int, str]] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None

    def start(self) -> Member:
        self.proc = subprocess.Popen(list(self.argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=self.cwd, bufsize=1)
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr,), daemon=True).start()
        return self

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            parts = line.split()
            if len(parts) == 4 and parts[0] == "R":
                self.records.append((int(parts[1]), int(parts[2]), parts[3]))
            else:
                self.other.append(line)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(self.stop_signal)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise AssertionError(f"{self.name} did not shut down cleanly:\n{self.output()}") from None
        return self.proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        return "".join(self.other[-40:])


def wait_for(what: str, cond: Callable[[], bool], timeout: float, explain: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{explain()}")


@dataclass
class Outcome:
    consumed: set[str]
    duplicates: int
    victim_records: int
    committed: dict[int, int]  # after every member stopped
    end_offsets: dict[int, int]
    committed_when_consumed: dict[int, int]  # when every record had been consumed, members still running
    state_after: str
    stored_keys: list[str]
    codecs: set[int]


def run_group_scenario(port: int, topic: str, group: str, produce: Callable[[int, int], None],
                       members: list[Member], server_log: Callable[[], str] = str,
                       join_timeout: float = 25.0, finish_timeout: float = 30.0) -> Outcome:
    """The shared story (see the module docstring); returns what the server and the members saw."""
    def explain() -> str:
        out = [f"--- {m.name} (alive={m.alive()}, {len(m.records)} records)\n{m.output()}" for m in members]
        desc = describe_group(port, group)
        return "\n".join(out) + f"\n--- group {desc['group_state']} {len(desc['members'])} members\n" \
            + server_log()[-3000:]

    assert partition_count(port, topic) == PARTITIONS
    try:
        for m in members:
            m.start()

        def stable_with_three() -> bool:
            d = describe_group(port, group)
            return d["group_state"] == "Stable" and len(d["members"]) == 3

        wait_for("a Stable group of three", stable_with_three, join_timeout, explain)
        produce(0, RECORDS // 2)
        victim = members[0]
        wait_for("the victim to consume", lambda: len(victim.records) >= 1, 20, explain)
        victim.kill()
        victim_records = len(victim.records)
        produce(RECORDS // 2, RECORDS)
        end = log_end_offsets(port, topic)
        assert sum(end.values()) == RECORDS

        def done() -> bool:
            seen = {k for m in members for _, _, k in m.records}
            return len(seen) == RECORDS and committed_offsets(port, group, topic) == end

        wait_for("every record consumed and committed", done, finish_timeout, explain)
        committed_when_consumed = committed_offsets(port, group, topic)
        for m in members[1:]:
            assert m.stop() == 0, m.output()
        wait_for("the group to be Empty", lambda: describe_group(port, group)["group_state"] == "Empty", 10,
                 explain)
    finally:
        for m in members:
            if m.alive():
                m.kill()
    guarded = [line for m in members for line in rdkafka_guard.hits(m.other)]
    assert not guarded, "librdkafka could not parse our answers:\n" + "".join(guarded[:20])
    all_records = [r for m in members for r in m.records]
    stored, codecs = stored_records(port, topic)
    return Outcome(consumed={k for _, _, k in all_records},
                   duplicates=len(all_records) - len({(p, o) for p, o, _ in all_records}),
                   victim_records=victim_records, committed=committed_offsets(port, group, topic),
                   end_offsets=log_end_offsets(port, topic),
                   state_after=describe_group(port, group)["group_state"], stored_keys=stored, codecs=codecs,
                   committed_when_consumed=committed_when_consumed)


def assert_scenario(out: Outcome, compression: int = Compression.GZIP, *, may_skip_compression: bool = False,
                    close_may_commit_stale: bool = False) -> None:
    """``may_skip_compression``: the client may send a small batch uncompressed (kafka-python does when
    compressing would not pay); its compressed batches must still be stored as sent.
    ``close_may_commit_stale``: the client, closing right after a rebalance gave it a partition back, may
    commit an older offset of that partition with its valid new generation (librdkafka 2.0.2 does; a server
    must store it, as Kafka does), so only the offsets committed while every member ran must equal the log
    end, and the final ones must lie within the log."""
    expected = set(keys(0, RECORDS))
    assert sorted(out.stored_keys) == sorted(expected), "the log holds exactly the produced records"
    if may_skip_compression:
        assert compression in out.codecs and out.codecs <= {Compression.NONE, compression}, \
            f"stored batches use codecs {out.codecs}"
    else:
        assert out.codecs == {compression}, f"stored batches use codecs {out.codecs}"
    assert out.consumed == expected, f"missing {sorted(expected - out.consumed)[:10]}"
    assert out.victim_records >= 1
    assert sum(out.end_offsets.values()) == RECORDS
    assert out.committed_when_consumed == out.end_offsets, \
        f"committed {out.committed_when_consumed} vs log end {out.end_offsets}"
    if close_may_commit_stale:
        assert out.committed.keys() == out.end_offsets.keys(), out.committed
        assert all(0 <= out.committed[p] <= end for p, end in out.end_offsets.items()), out.committed
    else:
        assert out.committed == out.end_offsets, f"committed after close {out.committed} vs log end {out.end_offsets}"
    assert out.state_after == "Empty"
