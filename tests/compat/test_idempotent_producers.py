"""Idempotent producers (issue #23): a retried batch that was already appended is answered with its first
offsets and not appended again. Real clients, real server: aiokafka whose first Produce answer is lost on
the way (a proxy drops it and cuts the connection), and confluent-kafka across a server restart.
Also ListOffsets max-timestamp (KIP-734) from confluent-kafka's AdminClient, and Metadata's internal topic."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from compat_support import call
from server_process import ServerProcess, free_port  # type: ignore[import-not-found]

PRODUCE = 0


class AnswerDropper:
    """A TCP proxy to the server that forwards everything, except that it swallows the first Produce answer
    and then cuts that client connection: the producer never learns its first batch was appended."""

    def __init__(self, listen_port: int, server_port: int) -> None:
        self.server_port = server_port
        self.listener = socket.create_server(("127.0.0.1", listen_port))
        self.dropped = 0
        self.closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.closing = True
        self.listener.close()

    def _accept(self) -> None:
        while not self.closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.server_port))
            apis: dict[int, int] = {}
            threading.Thread(target=self._requests, args=(client, server, apis), daemon=True).start()
            threading.Thread(target=self._answers, args=(server, client, apis), daemon=True).start()

    @staticmethod
    def _frames(sock: socket.socket) -> Iterator[bytes]:
        buf = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
                n = 4 + struct.unpack(">i", buf[:4])[0]
                yield buf[:n]
                buf = buf[n:]

    def _requests(self, client: socket.socket, server: socket.socket, apis: dict[int, int]) -> None:
        for frame in self._frames(client):
            api_key, corr = struct.unpack(">h", frame[4:6])[0], struct.unpack(">i", frame[8:12])[0]
            apis[corr] = api_key
            try:
                server.sendall(frame)
            except OSError:
                return

    def _answers(self, server: socket.socket, client: socket.socket, apis: dict[int, int]) -> None:
        for frame in self._frames(server):
            corr = struct.unpack(">i", frame[4:8])[0]
            if apis.get(corr) == PRODUCE and self.dropped == 0:
                self.dropped += 1
                for s in (client, server):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()
                return
            try:
                client.sendall(frame)
            except OSError:
                return


def read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    from kafka import KafkaConsumer

    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=5000)
    try:
        out = []
        for m in c:
            out.append(m.value)
            if len(out) >= expected + 50:  # enough to see duplicates, bounded
                break
        return out
    finally:
        c.close()


@pytest.mark.compat
def test_aiokafka_retry_after_a_lost_answer_appends_once(tmp_path: Path) -> None:
    from aiokafka import AIOKafkaProducer

    proxy_port = free_port()
    srv = ServerProcess(tmp_path / "data", "--advertised-port", str(proxy_port), "--num-partitions", "1").start()
    proxy = AnswerDropper(proxy_port, srv.port)
    try:
        async def produce() -> None:
            p = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{proxy_port}", enable_idempotence=True,
                                 acks="all", request_timeout_ms=5000, retry_backoff_ms=100)
            await p.start()
            try:
                for i in range(10):
                    await asyncio.wait_for(p.send_and_wait("idem", b"record-%d" % i, partition=0), 30)
            finally:
                await p.stop()

        asyncio.run(produce())
        assert proxy.dropped == 1, "the proxy dropped the first Produce answer"
        got = read_all(srv.bootstrap, "idem", 10)
        assert got == [b"record-%d" % i for i in range(10)], got
    finally:
        proxy.close()
        srv.stop()


@pytest.mark.compat
def test_confluent_idempotent_producer_across_a_restart(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    srv = ServerProcess(tmp_path / "data", "--num-partitions", "1").start()
    port = srv.port
    p = Producer({"bootstrap.servers": srv.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 60000, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
    failures: list[str] = []
    delivered: list[int] = []

    def on_delivery(err: object, msg: object) -> None:
        (failures if err is not None else delivered).append(str(err) if err is not None else 1)  # type: ignore[arg-type]

    try:
        n = 2000
        for i in range(n):
            p.produce("idem-restart", value=b"r%05d" % i, partition=0, on_delivery=on_delivery)
            p.poll(0)
            if i == n // 2:
                p.flush(0.01)  # some batches in flight while the server goes
                assert srv.stop() == 0
                srv = ServerProcess(tmp_path / "data", "--port", str(port), "--num-partitions", "1").start()
            if i % 200 == 0:
                time.sleep(0.01)
        assert p.flush(60) == 0
        assert failures == []
        assert len(delivered) == n
        got = read_all(srv.bootstrap, "idem-restart", n)
        assert sorted(got) == [b"r%05d" % i for i in range(n)], f"{len(got)} records for {n} produced"
        assert got == sorted(got), "in order"
    finally:
        srv.stop()


@pytest.mark.compat
def test_list_offsets_max_timestamp_from_confluent_admin(server: ServerProcess) -> None:
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for fut in admin.create_topics([NewTopic("maxts", 1, 1)]).values():
        fut.result(10)
    t = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 50})
    for dt in (100, 400, 200):
        p.produce("maxts", value=b"v", partition=0, timestamp=t + dt)
    assert p.flush(10) == 0
    res = admin.list_offsets({TopicPartition("maxts", 0): OffsetSpec.max_timestamp()})
    info = res[TopicPartition("maxts", 0)].result(10)
    assert (info.offset, info.timestamp) == (1, t + 400)


def test_metadata_lists_the_offsets_topic_as_internal(server: ServerProcess) -> None:
    topics = call(server.port, 3, 9, {"topics": None, "allow_auto_topic_creation": False})["topics"]
    internal = [(t["name"], t["is_internal"], len(t["partitions"])) for t in topics if t["is_internal"]]
    assert internal == [("__consumer_offsets", True, 50)]
    body = {"acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": "__consumer_offsets", "partition_data": [{"index": 0, "records": b""}]}]}
    part = call(server.port, 0, 9, body)["responses"][0]["partition_responses"][0]
    assert part["error_code"] == 17, "INVALID_TOPIC_EXCEPTION: clients cannot write to it"
