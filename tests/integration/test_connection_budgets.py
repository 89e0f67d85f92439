"""No client can take the server (issue #25): bounded answers per connection, fair serving, idle limits,
per-address limits and rate-limited logs, against the real server over TCP."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_process import ServerProcess  # type: ignore[import-not-found]

from protocol import codec

MIB = 1 << 20


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def api_versions_probe(port: int, timeout: float) -> bool:
    """A fresh connection's ApiVersions is answered within ``timeout`` seconds."""
    frame = codec.encode_request(18, 0, 1, "probe", {})
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(frame)
            head = s.recv(4)
            return len(head) == 4
    except OSError:
        return False


class Flooder:
    """A connection that pipelines all-topics Metadata requests and never reads an answer."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(0.5)
        self.request = codec.encode_request(3, 4, 7, "flood", {"topics": None, "allow_auto_topic_creation": False})
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        burst = self.request * 256
        while not self.stop.is_set():
            try:
                self.sock.sendall(burst)
                self.sent += 256
            except TimeoutError:  # the server stopped reading us: our send buffer is full
                continue
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def hundred_topics(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "0",
                        "--group-min-session-timeout-ms", "1000", "--num-partitions", "1").start()
    try:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap)
        admin.create_topics([NewTopic(f"topic-with-a-long-name-{i:03d}", 1, 1) for i in range(100)])
        admin.close()
        yield srv
    finally:
        srv.stop()


@pytest.mark.serial  # its 20 flooders load the CPU while a group must join and 10 probes answer within 1 s each
def test_twenty_connections_that_never_read_take_nothing_from_the_others(hundred_topics: ServerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    srv = hundred_topics
    assert srv.proc is not None
    pid = srv.proc.pid
    p = KafkaProducer(bootstrap_servers=srv.bootstrap)
    for i in range(10):
        p.send("topic-with-a-long-name-000", b"v%d" % i)
    p.flush(10)
    p.close()
    time.sleep(0.5)
    before = rss(pid)
    flooders = [Flooder(srv.port) for _ in range(20)]
    probes: list[bool] = []
    peak = before
    try:
        deadline = time.monotonic() + 8  # then at least 10 probes (0.5 s apart) while the flood goes on
        c = KafkaConsumer("topic-with-a-long-name-000", bootstrap_servers=srv.bootstrap, group_id="neighbour",
                          auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10000)
        got = []
        for m in c:
            got.append(m.value)
            if len(got) == 10:
                break
        c.commit()
        assert c.committed(TopicPartition("topic-with-a-long-name-000", 0)) == 10
        c.close()
        assert got == [b"v%d" % i for i in range(10)], "a group joined, fetched and committed meanwhile"
        while time.monotonic() < deadline or len(probes) < 10:
            probes.append(api_versions_probe(srv.port, 1.0))
            peak = max(peak, rss(pid))
            time.sleep(0.5)
        assert sum(f.sent for f in flooders) > 20 * 2000, "the flooders did send (and were then held off)"
    finally:
        for f in flooders:
            f.close()
    after_probes = []
    for _ in range(4):
        after_probes.append(api_versions_probe(srv.port, 1.0))
        time.sleep(0.25)
    assert all(probes) and len(probes) >= 10, f"probes during the flood: {probes}"
    assert all(after_probes), after_probes
    assert peak - before <= 64 * MIB, f"RSS grew by {(peak - before) / MIB:.0f} MiB"
    time.sleep(1)
    assert rss(pid) - before <= 64 * MIB
    assert srv.alive()


@pytest.fixture
def short_idle(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "data", "--connections-max-idle-ms", "600").start()
    try:
        yield srv
    finally:
        srv.stop()


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_idle_connections_are_closed_and_busy_ones_are_not(short_idle: ServerProcess) -> None:
    port = short_idle.port
    half = socket.create_connection(("127.0.0.1", port))
    half.sendall(b"\x00\x00\x01")  # 3 bytes of a frame's size, then nothing
    silent = socket.create_connection(("127.0.0.1", port))
    busy = socket.create_connection(("127.0.0.1", port))
    try:
        busy.settimeout(5)
        t0 = time.monotonic()
        answered = 0
        while time.monotonic() - t0 < 3:  # a request every 150 ms for 3 s: five idle periods
            busy.sendall(codec.encode_request(18, 0, answered, "busy", {}))
            size = struct.unpack(">i", busy.recv(4))[0]
            while size:
                size -= len(busy.recv(size))
            answered += 1
            time.sleep(0.15)
        assert answered >= 10
        assert closed_within(half, 5), "a half-sent frame does not keep a connection alive"
        assert closed_within(silent, 5), "nor does silence"
        busy.sendall(codec.encode_request(18, 0, 99, "busy", {}))
        assert len(busy.recv(4)) == 4, "the busy connection is still served"
    finally:
        for s in (half, silent, busy):
            s.close()
    assert short_idle.metric('groupcoord_connections_closed_total{reason="idle"}') >= 2


def test_max_connections_per_ip(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--max-connections-per-ip", "5").start()
    held: list[socket.socket] = []
    try:
        for i in range(5):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            s.sendall(codec.encode_request(18, 0, i, "held", {}))
            assert len(s.recv(4)) == 4, "the first five are served"
            held.append(s)
        t0 = time.monotonic()
        refused = 0
        for _ in range(1000):
            with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
                refused += closed_within(s, 5)
        burst = time.monotonic() - t0
        assert refused == 1000
        deadline = time.monotonic() + 5
        while srv.metric('groupcoord_connections_closed_total{reason="max_connections_per_ip"}') < 1000:
            assert time.monotonic() < deadline, "the metric counts every refusal"
            time.sleep(0.05)
        lines = [line for line in srv.log().splitlines() if "refusing another" in line]
        if burst < 4.5:  # the log's interval is 5 s: a burst within it is one line
            assert len(lines) == 1, lines[:5]
        assert 1 <= len(lines) <= 1 + burst / 5
    finally:
        for s in held:
            s.close()
        srv.stop()


def test_a_bad_per_ip_override_is_a_clear_startup_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"max\.connections\.per\.ip\.overrides"):
        ServerProcess(tmp_path / "data", "--max-connections-per-ip-overrides", "127.0.0.1:x").start()


def test_a_flooding_pipeline_is_served_in_turns(tmp_path: Path) -> None:
    """One connection pipelines 5,000 ApiVersions in one burst and reads them all back in order: fair turns
    and budgets only reorder the server's work, never a connection's answers."""
    srv = ServerProcess(tmp_path / "data").start()
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"".join(codec.encode_request(18, 0, i, "pipe", {}) for i in range(5000)))
            buf = b""
            corrs = []
            while len(corrs) < 5000:
                chunk = s.recv(1 << 16)
                assert chunk, f"closed after {len(corrs)} answers"
                buf += chunk
                while len(buf) >= 8 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
                    n = struct.unpack(">i", buf[:4])[0]
                    corrs.append(struct.unpack(">i", buf[4:8])[0])
                    buf = buf[4 + n:]
            assert corrs == list(range(5000))
    finally:
        srv.stop()
    assert os.path.exists(tmp_path / "data")
