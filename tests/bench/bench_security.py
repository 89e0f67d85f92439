"""Security benchmark (#34): what TLS + SASL and the authorizer cost the durable commit path, in one run.

Run from the repository root:  .venv/bin/python -m tests.bench.bench_security [--seconds 4] [--rounds 3]
Three real `groupcoord serve` daemons (subprocesses) and one load generator (this process, trio):
1. Durable simple OffsetCommits/s (generation -1, one partition each, CONNS connections x DEPTH pipelined,
   closed loop) over SASL_SSL (SCRAM-SHA-512 login once per connection, then TLS) against PLAINTEXT on the
   same server, rounds alternating P S P S ...; ratio = median of each SASL_SSL round over the mean of the
   PLAINTEXT rounds around it (target >= 0.7).
2. The same commits on a server with the authorizer on and 10,000 ACLs loaded (literal and prefixed, for
   other principals and resources, plus the ACLs the load needs) against a server with no authorizer,
   rounds alternating (target >= 0.9).
3. Consume MB/s: one connection reading ``--consume-mb`` MiB of 16 KiB records with Fetch v12 (1 MiB
   answers, one at a time) over SASL_SSL against PLAINTEXT on the same server, alternating (target >= 0.5).
Not measured yet (noted in the issue): heartbeats/s over SASL_SSL, the authentication storm beside a
heartbeat load. Prints a table and the command; asserts nothing.
"""

from __future__ import annotations

import argparse
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "security"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from security_support import USERS, add_users, make_pki, write_config  # noqa: E402
from server_process import ServerProcess  # noqa: E402

from protocol import codec  # noqa: E402

OFFSET_COMMIT, SASL_HANDSHAKE, SASL_AUTHENTICATE = 8, 17, 36
CONNS, DEPTH = 32, 16
TOPIC = "bench-topic"


def commit_frame(corr: int, group: str, offset: int) -> bytes:
    return codec.encode_request(OFFSET_COMMIT, 8, corr, "bench", {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                    "committed_leader_epoch": -1, "committed_metadata": ""}]}]})


class Framed:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream, self.buf = stream, bytearray()

    async def read(self) -> bytes:
        while True:
            if len(self.buf) >= 4:
                size = int.from_bytes(self.buf[:4], "big")
                if len(self.buf) >= 4 + size:
                    frame = bytes(self.buf[4:4 + size])
                    del self.buf[:4 + size]
                    return frame
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise EOFError("closed by the server")
            self.buf += chunk


async def connect(port: int, tls: ssl.SSLContext | None) -> Framed:
    stream: trio.abc.Stream = await trio.open_tcp_stream("127.0.0.1", port)
    if tls is not None:
        stream = trio.SSLStream(stream, tls, server_hostname="127.0.0.1")
        await stream.do_handshake()
        framed = Framed(stream)
        from scramp import ScramClient

        client = ScramClient(["SCRAM-SHA-512"], "alice", USERS["alice"])
        await stream.send_all(codec.encode_request(SASL_HANDSHAKE, 1, 1, "bench", {"mechanism": "SCRAM-SHA-512"}))
        await framed.read()
        await stream.send_all(codec.encode_request(SASL_AUTHENTICATE, 2, 2, "bench",
                                                   {"auth_bytes": client.get_client_first().encode()}))
        first = codec.decode_response(SASL_AUTHENTICATE, 2, await framed.read())[1]
        client.set_server_first(first["auth_bytes"].decode())
        await stream.send_all(codec.encode_request(SASL_AUTHENTICATE, 2, 3, "bench",
                                                   {"auth_bytes": client.get_client_final().encode()}))
        final = codec.decode_response(SASL_AUTHENTICATE, 2, await framed.read())[1]
        assert final["error_code"] == 0, final
        return framed
    return Framed(stream)


async def commits_per_s(port: int, tls: ssl.SSLContext | None, seconds: float) -> float:
    done = 0
    conns = [await connect(port, tls) for _ in range(CONNS)]

    async def one(i: int, framed: Framed) -> None:
        nonlocal done
        group, corr = f"bench-g{i}", 100
        batch = b"".join(commit_frame(corr + k, group, k) for k in range(DEPTH))
        deadline = trio.current_time() + seconds
        while trio.current_time() < deadline:
            await framed.stream.send_all(batch)
            for _ in range(DEPTH):
                await framed.read()
            done += DEPTH

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i, framed in enumerate(conns):
            nursery.start_soon(one, i, framed)
    took = time.perf_counter() - t0
    for framed in conns:
        await framed.stream.aclose()
    return done / took


async def fetch_mb_per_s(port: int, tls: ssl.SSLContext | None, topic: str, end: int) -> float:
    """Read ``topic``-0 from offset 0 to ``end`` with Fetch v12 (1 MiB answers, one at a time): MB/s."""
    framed = await connect(port, tls)
    offset, got, corr = 0, 0, 10
    t0 = time.perf_counter()
    while offset < end:
        corr += 1
        await framed.stream.send_all(codec.encode_request(1, 12, corr, "bench", {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": offset, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}]}))
        payload = await framed.read()
        part = codec.decode_response(1, 12, payload)[1]["responses"][0]["partitions"][0]
        records = part["records"] or b""
        got += len(payload)
        last = 0
        pos = 0
        while pos + 12 <= len(records):  # the last offset of the last whole batch
            size = int.from_bytes(records[pos + 8:pos + 12], "big") + 12
            if pos + size > len(records):
                break
            last = int.from_bytes(records[pos:pos + 8], "big") + int.from_bytes(records[pos + 23:pos + 27], "big")
            pos += size
        offset = last + 1
    took = time.perf_counter() - t0
    await framed.stream.aclose()
    return got / took / 1e6


def fill(port: int, topic: str, mb: int) -> int:
    """``mb`` MiB of 16 KiB records into ``topic``-0 (our producer, acks=1); returns the log end."""
    from client import AdminClient, NewTopic, Producer

    with AdminClient(f"127.0.0.1:{port}") as admin:
        admin.create_topics([NewTopic(topic, 1)])
    count = mb * 64
    with Producer(f"127.0.0.1:{port}", linger_ms=5, batch_size=1 << 20) as producer:
        for i in range(count):
            producer.send(topic, value=b"%08d" % i + b"x" * (16 * 1024 - 8), partition=0)
        producer.flush(120)
    return count


def alternate(rounds: int, base: Any, other: Any) -> tuple[list[float], list[float], float]:
    """B O B O ... B: each O over the mean of the B around it; the median of those."""
    bases, others = [base()], []
    for _ in range(rounds):
        others.append(other())
        bases.append(base())
    ratios = [o / ((bases[i] + bases[i + 1]) / 2) for i, o in enumerate(others)]
    return bases, others, statistics.median(ratios)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--acls", type=int, default=10_000, help="ACLs loaded besides the load's own")
    ap.add_argument("--consume-mb", type=int, default=128, help="MiB read per consume round")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-security-"))
    pki = make_pki(work / "pki")
    servers: list[ServerProcess] = []
    try:
        add_users(work / "tls-data", {"alice": USERS["alice"]})
        tls_cfg = write_config(work / "tls.toml", pki, {"group.initial.rebalance.delay.ms": 0},
                               ("PLAINTEXT", "SASL_SSL"))
        tls_server = ServerProcess(work / "tls-data", "--config", str(tls_cfg), "--metrics-port", "-1",
                                   listeners=True).start().wait_loaded()
        servers.append(tls_server)
        plain = ServerProcess(work / "plain-data", "--metrics-port", "-1").start().wait_loaded()
        servers.append(plain)
        acl_data = work / "acl-data"
        authorizer = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
        seeding = ServerProcess(acl_data, "--config", str(write_config(
            work / "seed.toml", pki, {**authorizer, "super.users": "User:ANONYMOUS"}, ("PLAINTEXT",))),
            "--metrics-port", "-1", listeners=True).start()
        load_acls(seeding.port, a.acls)  # as a super user; the ACLs are durable
        seeding.stop()
        acl_server = ServerProcess(acl_data, "--config", str(write_config(
            work / "acl.toml", pki, {**authorizer, "super.users": "User:admin"}, ("PLAINTEXT",))),
            "--metrics-port", "-1", listeners=True).start().wait_loaded()
        servers.append(acl_server)
        client_tls = ssl.create_default_context(cafile=str(pki.ca))

        def run(port: int, tls: ssl.SSLContext | None) -> float:
            return trio.run(commits_per_s, port, tls, a.seconds)

        p1, s1, sasl_ratio = alternate(a.rounds, lambda: run(tls_server.port, None),
                                       lambda: run(tls_server.ports["SASL_SSL"], client_tls))
        p2, s2, acl_ratio = alternate(a.rounds, lambda: run(plain.port, None), lambda: run(acl_server.port, None))
        end = fill(tls_server.port, "bench-consume", a.consume_mb)

        def read(port: int, tls: ssl.SSLContext | None) -> float:
            return trio.run(fetch_mb_per_s, port, tls, "bench-consume", end)

        c1, c2, tls_ratio = alternate(a.rounds, lambda: read(tls_server.port, None),
                                      lambda: read(tls_server.ports["SASL_SSL"], client_tls))
    finally:
        for s in servers:
            s.stop()
    print(f"\n{'figure':58} {'value':>14} {'target':>8} {'ratio':>6}")
    print(f"{'durable commits/s PLAINTEXT (same server), mean':58} {statistics.mean(p1):14,.0f}")
    print(f"{'durable commits/s SASL_SSL SCRAM-SHA-512, mean':58} {statistics.mean(s1):14,.0f} {'>=0.7x':>8} "
          f"{sasl_ratio:6.2f}")
    print(f"{'durable commits/s, no authorizer, mean':58} {statistics.mean(p2):14,.0f}")
    print(f"{f'durable commits/s, authorizer + {a.acls:,} ACLs, mean':58} {statistics.mean(s2):14,.0f} "
          f"{'>=0.9x':>8} {acl_ratio:6.2f}")
    print(f"{'consume MB/s PLAINTEXT (Fetch v12, 1 MiB answers), mean':58} {statistics.mean(c1):14,.1f}")
    print(f"{'consume MB/s SASL_SSL (TLS), mean':58} {statistics.mean(c2):14,.1f} {'>=0.5x':>8} {tls_ratio:6.2f}")
    print(f"\n({CONNS} connections x {DEPTH} pipelined one-partition commits, {a.seconds:g} s rounds, "
          f"{a.rounds} compared rounds each)\ncommand: .venv/bin/python -m tests.bench.bench_security "
          f"--seconds {a.seconds:g} --rounds {a.rounds} --acls {a.acls} --consume-mb {a.consume_mb}")
    return 0


def load_acls(port: int, count: int) -> None:
    """``count`` ACLs for other principals and resources (half literal, half prefixed), plus what the load
    needs: ANONYMOUS may Read the groups bench-* and the topic (one CreateAcls of 500 at a time)."""
    import socket

    from server_process import read_frame

    def creations(items: list[tuple[int, str, int, str, int, int]]) -> dict[str, Any]:
        return {"creations": [{"resource_type": rt, "resource_name": n, "resource_pattern_type": pt, "principal": pr,
                               "host": "*", "operation": op, "permission_type": 3} for rt, n, pt, pr, op, _ in items]}

    wanted = [(3, "bench-g", 4, "User:ANONYMOUS", 3, 3), (2, TOPIC, 3, "User:ANONYMOUS", 3, 3)]
    others = [(2 if i % 2 else 3, f"other-{i}", 3 if i % 4 < 2 else 4, f"User:u{i % 97}", 3, 3)
              for i in range(count)]
    items = wanted + others
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        for corr, start in enumerate(range(0, len(items), 500)):
            sock.sendall(codec.encode_request(30, 3, corr, "bench", creations(items[start:start + 500])))
            answer = codec.decode_response(30, 3, read_frame(sock) or b"")[1]
            assert all(r["error_code"] == 0 for r in answer["results"]), answer["results"][:3]


if __name__ == "__main__":
    sys.exit(main())
