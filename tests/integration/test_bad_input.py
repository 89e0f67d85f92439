"""Bad input: startup errors are one clear line and exit status 2; a running server survives bad clients.

Stories:
- Startup: a config file that is not TOML, an unknown key, a value of the wrong type or out of range (file,
  env var, flag), a config file that does not exist, a data dir that is a regular file, a data dir whose
  parent cannot be created (a regular file on the way, or under /proc; tests run as root so permissions
  would not stop us): each prints exactly one line naming the problem and exits with status 2, no traceback.
- Running (socket.request.max.bytes 8192): a frame declaring 9000 bytes, or 2**31-1 bytes, closes only
  that connection (one log line each); a connection opened before and one opened after still get answers.
- Running (default 100 MiB limit): a frame declaring 100 MiB of which 64 KiB arrive does not make the
  server allocate the declared size.
- Running: requests that decode but make no sense get Kafka's error codes, not a closed connection.
- Running: 20 connections of seeded random garbage do not stop the server.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server_process import REPO, ServerProcess, raw_exchange  # type: ignore[import-not-found]

from protocol import codec


def _serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = ["--port", "0", "--metrics-port", "-1"]
    if "--data-dir" not in args:
        base += ["--data-dir", str(tmp_path / "data")]
    return subprocess.run([sys.executable, "-m", "coordinator.cli", "serve", *base, *args], check=False, cwd=REPO,
                          capture_output=True, text=True, timeout=30, env=dict(os.environ, **(env or {})))


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "groupcoord.toml"
    path.write_text(text)
    return str(path)


def _regular_file(tmp_path: Path) -> Path:
    path = tmp_path / "not-a-dir"
    path.write_text("I am a file\n")
    return path


STARTUP_ERRORS: list[tuple[str, Any, list[str]]] = [
    ("garbage config file", lambda t: ["--config", _write(t, "port = = 9092 [[[\n\x00")], ["not valid TOML"]),
    ("unknown key", lambda t: ["--config", _write(t, '"no.such.key" = 1\n')], ["unknown config key", "no.such.key"]),
    ("wrong type in file", lambda t: ["--config", _write(t, 'port = "ninety"\n')], ["port", "ninety"]),
    ("below minimum flag", lambda t: ["--group-max-size", "0"], ["group.max.size", "minimum"]),
    ("bad bool flag", lambda t: ["--auto-create-topics-enable", "maybe"], ["auto.create.topics.enable", "maybe"]),
    ("missing config file", lambda t: ["--config", str(t / "absent.toml")], ["absent.toml"]),
    ("data dir is a file", lambda t: ["--data-dir", str(_regular_file(t))], ["cannot use data dir", "not-a-dir"]),
    ("data dir parent is a file", lambda t: ["--data-dir", str(_regular_file(t) / "sub" / "data")],
     ["cannot use data dir", "Not a directory"]),
    ("data dir under /proc", lambda t: ["--data-dir", "/proc/groupcoord-cannot-exist/data"],
     ["cannot use data dir", "/proc/groupcoord-cannot-exist/data"]),
]


@pytest.mark.parametrize(("case", "make_args", "words"), STARTUP_ERRORS, ids=[c[0] for c in STARTUP_ERRORS])
def test_startup_error_is_one_clear_line_and_status_2(tmp_path: Path, case: str, make_args: Any,
                                                      words: list[str]) -> None:
    result = _serve(tmp_path, *make_args(tmp_path))
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("groupcoord: "), lines
    assert all(w in lines[0] for w in words), lines[0]


def test_bad_env_var_is_a_startup_error(tmp_path: Path) -> None:
    result = _serve(tmp_path, env={"GROUPCOORD_GROUP_MIN_SESSION_TIMEOUT_MS": "soon"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "group.min.session.timeout.ms" in result.stderr and "soon" in result.stderr
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------------- running server

@pytest.fixture(scope="module")
def small_frames(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("bad") / "data", "--socket-request-max-bytes", "8192",
                        "--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0").start()
    try:
        yield srv
    finally:
        srv.stop()


def _metadata_ok(sock: socket.socket, corr: int, port: int) -> bool:
    sock.sendall(codec.encode_request(3, 1, corr, "t", {"topics": None}))
    head = sock.recv(4, socket.MSG_WAITALL)
    payload = sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    got_corr, body = codec.decode_response(3, 1, payload)
    return got_corr == corr and body["brokers"][0]["port"] == port


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_oversized_frames_close_only_their_connection(small_frames: ServerProcess) -> None:
    port = small_frames.port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as before:
        assert _metadata_ok(before, 1, port)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as big:
            body = struct.pack(">hhi", 3, 1, 2) + struct.pack(">h", 1) + b"t" + bytes(9000 - 9)
            try:
                big.sendall(struct.pack(">i", 9000) + body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed while we were still sending: also fine
            assert _closed(big)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as huge:
            huge.sendall(struct.pack(">i", 2**31 - 1) + b"\x00\x03")
            assert _closed(huge)
        assert _metadata_ok(before, 2, port)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as after:
            assert _metadata_ok(after, 3, port)
    log = small_frames.log()
    # repeated per-connection events are logged at most once per kind every few seconds (the line after
    # says how many it stands for); the metric counts each one
    assert "frame size 9000 outside 0..8192" in log
    assert small_frames.metric('groupcoord_protocol_errors_total{kind="FrameTooLarge"}') == 2
    assert small_frames.alive()


# request, version, body, expected error code (path into the decoded response)
NONSENSE: list[tuple[str, int, int, dict[str, Any], Any, int]] = [
    ("join with empty group id", 11, 5,
     {"group_id": "", "session_timeout_ms": 1500, "rebalance_timeout_ms": 3000, "member_id": "",
      "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]},
     lambda b: b["error_code"], 24),                                  # INVALID_GROUP_ID
    ("join with a 10 ms session", 11, 5,
     {"group_id": "g-nonsense", "session_timeout_ms": 10, "rebalance_timeout_ms": 3000, "member_id": "",
      "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]},
     lambda b: b["error_code"], 26),                                  # INVALID_SESSION_TIMEOUT
    ("join with no protocols", 11, 5,
     {"group_id": "g-nonsense", "session_timeout_ms": 1500, "rebalance_timeout_ms": 3000, "member_id": "",
      "group_instance_id": None, "protocol_type": "consumer", "protocols": []},
     lambda b: b["error_code"], 23),                                  # INCONSISTENT_GROUP_PROTOCOL
    ("heartbeat for an unknown group", 12, 3,
     {"group_id": "g-unknown", "generation_id": 4, "member_id": "nobody", "group_instance_id": None},
     lambda b: b["error_code"], 25),                                  # UNKNOWN_MEMBER_ID
    ("sync for an unknown group", 14, 3,
     {"group_id": "g-unknown", "generation_id": 4, "member_id": "nobody", "group_instance_id": None,
      "assignments": []},
     lambda b: b["error_code"], 25),                                  # UNKNOWN_MEMBER_ID
    ("delete an unknown group", 42, 1, {"groups_names": ["g-unknown"]},
     lambda b: b["results"][0]["error_code"], 69),                    # GROUP_ID_NOT_FOUND
    ("commit with oversized metadata", 8, 5,
     {"group_id": "g-meta", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
      "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                               "committed_leader_epoch": -1, "committed_metadata": "x" * 4097}]}]},
     lambda b: b["topics"][0]["partitions"][0]["error_code"], 12),   # OFFSET_METADATA_TOO_LARGE
]


@pytest.mark.parametrize(("case", "api", "version", "body", "pick", "error"), NONSENSE,
                         ids=[n[0] for n in NONSENSE])
def test_nonsense_requests_get_kafka_error_codes(small_frames: ServerProcess, case: str, api: int, version: int,
                                                 body: dict[str, Any], pick: Any, error: int) -> None:
    for _ in range(100):
        payload = raw_exchange(small_frames.port, codec.encode_request(api, version, 77, "t", body))
        assert payload, f"{case}: the server closed the connection"
        corr, decoded = codec.decode_response(api, version, payload)
        if pick(decoded) != 14:  # COORDINATOR_LOAD_IN_PROGRESS right after startup
            break
        time.sleep(0.05)
    assert corr == 77 and pick(decoded) == error


def test_random_garbage_connections_do_not_stop_the_server(small_frames: ServerProcess) -> None:
    rng = random.Random(20240611)
    for i in range(20):
        junk = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 3000)))
        if i % 2:  # a plausible size and api header, then junk
            junk = struct.pack(">ihhi", len(junk) + 8, rng.choice([8, 9, 11, 12, 13, 14, 15, 16, 42]),
                               rng.randrange(0, 10), i) + junk
        with socket.create_connection(("127.0.0.1", small_frames.port), timeout=5) as s:
            try:
                s.sendall(junk)
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
            except (BrokenPipeError, ConnectionResetError):
                pass
    assert small_frames.alive()
    with socket.create_connection(("127.0.0.1", small_frames.port), timeout=5) as s:
        assert _metadata_ok(s, 5, small_frames.port)
    assert "Traceback" not in small_frames.log()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_declared_frame_size_is_not_allocated_up_front(server: ServerProcess) -> None:
    assert server.proc is not None
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as first:
        assert _metadata_ok(first, 1, server.port)        # warm up the request path
    before = _rss_kb(server.proc.pid)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(struct.pack(">i", 100 * 1024 * 1024) + bytes(64 * 1024))
        time.sleep(0.3)
        grown = _rss_kb(server.proc.pid) - before
        assert grown < 16 * 1024, f"RSS grew by {grown} kB for 64 KiB received"
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as other:
            assert _metadata_ok(other, 2, server.port)
    assert server.alive()
