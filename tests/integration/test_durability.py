"""Durability of offset commits, over TCP against the real daemon.

Stories:
- A client pipelines simple (generation -1) OffsetCommits for two groups and four partitions each, every
  commit carrying a larger offset than the previous one for its partition, and notes each commit whose
  response came back with error 0. The server is SIGKILLed mid-stream and restarted on the same data dir:
  for every partition the committed offset is at least the last acknowledged one (an acknowledgement is
  only sent after fsync), and it is a value the client actually sent.
- Five commits, each acknowledged before the next (one batch each), then a clean stop. The tail of the
  offsets partition's segment is damaged (truncated inside the last batch, or one byte of it flipped):
  the server starts, logs the truncation, and serves the offset committed just before the damaged batch.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from server_process import ServerProcess, raw_exchange, read_frame  # type: ignore[import-not-found]

from coordinator.core.sharding import partition_for
from protocol import codec

FLAGS = ("--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0")
TOPIC = "payments"
COORDINATOR_LOAD_IN_PROGRESS = 14
COMMIT_V, FETCH_V = 8, 7


def commit_frame(corr: int, group: str, partition: int, offset: int) -> bytes:
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": partition, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": None}]}]}
    return codec.encode_request(8, COMMIT_V, corr, "durability", body)


def fetch_offsets(port: int, group: str, partitions: list[int]) -> dict[int, int]:
    """OffsetFetch, retrying while the group's offsets partition is still loading."""
    body = {"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": partitions}],
            "require_stable": False}
    for _ in range(100):
        _, resp = codec.decode_response(9, FETCH_V, raw_exchange(port, codec.encode_request(9, FETCH_V, 1, "t", body)))
        if resp["error_code"] != COORDINATOR_LOAD_IN_PROGRESS:
            assert resp["error_code"] == 0
            return {p["partition_index"]: p["committed_offset"] for t in resp["topics"] for p in t["partitions"]}
        time.sleep(0.05)
    raise AssertionError(f"group {group} never finished loading")


class CommitStream:
    """Pipelined commits on one connection: a sender (window of 64 in flight) and a receiver thread."""

    def __init__(self, port: int, groups: list[str], partitions: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.keys = [(g, p) for g in groups for p in range(partitions)]
        self.sent: dict[int, tuple[str, int, int]] = {}
        self.sent_values: dict[tuple[str, int], set[int]] = {k: set() for k in self.keys}
        self.acked: dict[tuple[str, int], int] = {}
        self.acks = 0
        self.errors: list[int] = []
        self.window = threading.Semaphore(64)
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._send, daemon=True),
                        threading.Thread(target=self._receive, daemon=True)]

    def start(self) -> CommitStream:
        for t in self.threads:
            t.start()
        return self

    def _send(self) -> None:
        corr = 0
        while not self.stop.is_set():
            if not self.window.acquire(timeout=0.5):
                continue
            corr += 1
            group, partition = self.keys[corr % len(self.keys)]
            offset = corr * 10
            self.sent[corr] = (group, partition, offset)
            self.sent_values[(group, partition)].add(offset)
            try:
                self.sock.sendall(commit_frame(corr, group, partition, offset))
            except OSError:
                return

    def _receive(self) -> None:
        while (payload := read_frame(self.sock)) is not None:
            corr, resp = codec.decode_response(8, COMMIT_V, payload)
            group, partition, offset = self.sent[corr]
            (error,) = [p["error_code"] for t in resp["topics"] for p in t["partitions"]]
            if error == 0:
                self.acked[(group, partition)] = offset
                self.acks += 1
            elif error != COORDINATOR_LOAD_IN_PROGRESS:
                self.errors.append(error)
            self.window.release()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        for t in self.threads:
            t.join(5)


def test_acknowledged_commits_survive_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    groups = ["ledger-a", "ledger-b"]
    srv = ServerProcess(data, *FLAGS).start()
    try:
        for g in groups:
            fetch_offsets(srv.port, g, [0])
        stream = CommitStream(srv.port, groups, partitions=4).start()
        deadline = time.monotonic() + 10
        while stream.acks < 400 and time.monotonic() < deadline:
            time.sleep(0.01)
        srv.kill()                                   # mid-stream: the sender never stops on its own
        stream.close()
    finally:
        srv.kill()
    assert stream.acks >= 400 and stream.errors == []
    assert len(stream.sent) > stream.acks            # some commits were in flight when it died
    assert set(stream.acked) == set(stream.keys)

    again = ServerProcess(data, *FLAGS).start()
    try:
        for g in groups:
            fetched = fetch_offsets(again.port, g, [0, 1, 2, 3])
            for p, offset in fetched.items():
                assert offset >= stream.acked[(g, p)], (g, p, offset, stream.acked[(g, p)])
                assert offset in stream.sent_values[(g, p)]
    finally:
        again.stop()


def _five_commits_then_end(data: Path, group: str, end: str, flags: tuple[str, ...]) -> Path:
    srv = ServerProcess(data, *flags).start()
    try:
        fetch_offsets(srv.port, group, [0])
        for offset in range(1, 6):
            _, resp = codec.decode_response(8, COMMIT_V, raw_exchange(srv.port, commit_frame(offset, group, 0, offset)))
            assert resp["topics"][0]["partitions"][0]["error_code"] == 0
        assert fetch_offsets(srv.port, group, [0]) == {0: 5}
    finally:
        if end == "clean-stop":
            assert srv.stop() == 0
        srv.kill()
    segment = data / f"__consumer_offsets-{partition_for(group, 50)}" / f"{0:020d}.log"
    assert segment.stat().st_size > 0
    return segment


NO_JOURNAL = ("--log-journal-enable", "false")


@pytest.mark.parametrize(("end", "damage", "logged", "journal"), [
    ("clean-stop", "truncate-mid-batch", "partial batch", True),    # storage: size differs from its index
    ("sigkill", "flip-byte-near-end", "CRC mismatch", False),       # storage: past its recovery point
    ("clean-stop", "flip-byte-near-end", "CRC mismatch", True),     # trusted by storage, caught at load
])
def test_damaged_tail_is_dropped_and_earlier_offsets_are_served(tmp_path: Path, end: str, damage: str,
                                                                logged: str, journal: bool) -> None:
    """The partition log alone: a damaged tail is cut and the offsets before it are served. (After a clean
    stop the journal is empty; after a SIGKILL it would restore the batch: the next test.)"""
    data, group = tmp_path / "data", "ledger"
    flags = FLAGS if journal else FLAGS + NO_JOURNAL
    segment = _five_commits_then_end(data, group, end, flags)
    raw = bytearray(segment.read_bytes())
    if damage == "truncate-mid-batch":
        del raw[-10:]
    else:
        raw[-3] ^= 0xFF
    segment.write_bytes(bytes(raw))

    srv = ServerProcess(data, *flags).start()
    try:
        assert fetch_offsets(srv.port, group, [0]) == {0: 4}
        log_lines = [line for line in srv.log().splitlines() if logged in line]
        assert len(log_lines) == 1 and segment.parent.name in log_lines[0], srv.log()
        if damage != "flip-byte-near-end" or end == "sigkill":
            assert "truncating" in log_lines[0]
        _, resp = codec.decode_response(8, COMMIT_V, raw_exchange(srv.port, commit_frame(6, group, 0, 6)))
        assert resp["topics"][0]["partitions"][0]["error_code"] == 0
    finally:
        assert srv.stop() == 0
    again = ServerProcess(data, *flags).start()       # the repaired log keeps taking commits
    try:
        assert fetch_offsets(again.port, group, [0]) == {0: 6}
    finally:
        assert again.stop() == 0


def test_journal_restores_an_acknowledged_commit_the_partition_log_lost(tmp_path: Path) -> None:
    """SIGKILL after five acknowledged commits, then the partition log's last batch is damaged (as if its
    page cache never reached the disk): the log is cut at the damage, and the journal, fsynced before each
    acknowledgement, re-appends the lost batch, so all five commits are served; the journal is emptied."""
    data, group = tmp_path / "data", "ledger"
    segment = _five_commits_then_end(data, group, "sigkill", FLAGS)
    assert any((data / "journal").iterdir())
    raw = bytearray(segment.read_bytes())
    raw[-3] ^= 0xFF
    segment.write_bytes(bytes(raw))

    srv = ServerProcess(data, *FLAGS).start()
    try:
        assert fetch_offsets(srv.port, group, [0]) == {0: 5}
        log = srv.log()
        assert "truncating" in log and segment.parent.name in log, log
        assert "1 re-appended" in log, log
    finally:
        assert srv.stop() == 0
    assert [p.name for p in (data / "journal").iterdir()] == []  # clean stop: every log flushed, journal gone
    again = ServerProcess(data, *FLAGS).start()
    try:
        assert fetch_offsets(again.port, group, [0]) == {0: 5}
    finally:
        assert again.stop() == 0
