"""The daemon over TCP: real clients see one broker; bad frames close only their own connection."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess

import pytest
from server_process import ServerProcess, raw_exchange  # type: ignore[import-not-found]

from protocol import codec
from protocol.errors import ErrorCode


def test_kcat_lists_the_broker(server: ServerProcess) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat must be installed (make test installs it with apt-get)"
    out = subprocess.run([kcat, "-b", server.bootstrap, "-L", "-m", "10"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert "1 brokers:" in out.stdout
    assert f"broker 0 at 127.0.0.1:{server.port}" in out.stdout


def test_kafka_python_describe_cluster(server: ServerProcess) -> None:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    try:
        info = admin.describe_cluster()
    finally:
        admin.close()
    assert info["brokers"] == [{"broker_id": 0, "host": "127.0.0.1", "port": server.port, "rack": None}]
    assert info["controller_id"] == 0


def test_confluent_kafka_list_topics(server: ServerProcess) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    md = admin.list_topics(timeout=10)
    assert list(md.brokers) == [0]
    assert md.brokers[0].host == "127.0.0.1" and md.brokers[0].port == server.port


def test_api_versions_v5_gets_error_35_with_a_v0_body(server: ServerProcess) -> None:
    frame = struct.pack(">hhi", 18, 5, 1234) + struct.pack(">h", 4) + b"test" + b"\x00\x00\x00"
    payload = raw_exchange(server.port, struct.pack(">i", len(frame)) + frame)
    corr, body = codec.decode_response(18, 0, payload)
    assert corr == 1234
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert keys[18] == (0, 4) and keys[3] == (0, 13)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_api_versions_supported_versions(server: ServerProcess, version: int) -> None:
    req = codec.encode_request(18, version, 7, "t", {"client_software_name": "t", "client_software_version": "1"})
    corr, body = codec.decode_response(18, version, raw_exchange(server.port, req))
    assert corr == 7 and body["error_code"] == 0


def _closed_by_server(port: int, data: bytes) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        try:
            return s.recv(1) == b""
        except ConnectionResetError:
            return True


def test_bad_frames_close_the_connection_and_the_server_keeps_serving(server: ServerProcess) -> None:
    tls_hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32)
    assert _closed_by_server(server.port, tls_hello)                           # ~370 MB "length"
    assert _closed_by_server(server.port, struct.pack(">i", -5))              # negative length
    assert _closed_by_server(server.port, struct.pack(">i", 6) + b"\x00\x0b\x00\x63\x00\x00")  # short
    bogus = struct.pack(">hhi", 11, 99, 1) + b"\xff\xff"                       # JoinGroup v99
    assert _closed_by_server(server.port, struct.pack(">i", len(bogus)) + bogus)
    garbage = struct.pack(">hhi", 3, 1, 1) + b"\xff\xff" + b"\x7f\xff\xff\xff"  # huge topic array
    assert _closed_by_server(server.port, struct.pack(">i", len(garbage)) + garbage)
    assert server.alive()
    req = codec.encode_request(3, 1, 9, "t", {"topics": None})
    corr, body = codec.decode_response(3, 1, raw_exchange(server.port, req))
    assert corr == 9 and body["brokers"][0]["port"] == server.port
    assert "closing connection" in server.log()


def test_pipelined_requests_are_answered_in_order(server: ServerProcess) -> None:
    frames = b"".join(codec.encode_request(18 if i % 2 else 3, 1, i, "t", {"topics": []}) for i in range(50))
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(frames)
        seen = []
        buf = b""
        while len(seen) < 50:
            chunk = s.recv(65536)
            assert chunk
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
                n = struct.unpack(">i", buf[:4])[0]
                seen.append(struct.unpack(">i", buf[4:8])[0])
                buf = buf[4 + n:]
    assert seen == list(range(50))
