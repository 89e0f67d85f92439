"""The real server loads its offsets partitions through a decoding process (``parallel_load``).

Rules checked: above ``offsets.load.worker.min.bytes`` (0 here) the load line says "decoded by a second
process" and every committed offset comes back; with -1 the load is in-process and gives the same offsets.
"""

from __future__ import annotations

import socket
from pathlib import Path

from server_process import ServerProcess, read_frame

from protocol import codec

GROUPS = 2_000


def commit(i: int) -> bytes:
    return codec.encode_request(8, 8, i, "t", {
        "group_id": f"load-{i}", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": i * 100 + k * 10 + p,
                                               "committed_leader_epoch": -1, "committed_metadata": ""}
                                              for p in range(5)]} for k, t in enumerate(("a", "b"))]})


def fetch_all(port: int, groups: range) -> dict[str, dict[tuple[str, int], int]]:
    out = {}
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        for i in groups:
            s.sendall(codec.encode_request(9, 5, i, "t", {"group_id": f"load-{i}", "topics": None}))
            payload = read_frame(s)
            assert payload is not None
            _, body = codec.decode_response(9, 5, payload)
            out[f"load-{i}"] = {(t["name"], p["partition_index"]): p["committed_offset"]
                                for t in body["topics"] for p in t["partitions"]}
    return out


def test_a_load_through_the_decoding_process_gives_every_offset_back(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = ServerProcess(data, "--offsets-load-worker-min-bytes", "-1").start()
    try:
        srv.wait_loaded()
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            for start in range(0, GROUPS, 200):
                s.sendall(b"".join(commit(i) for i in range(start, start + 200)))
                for _ in range(200):
                    payload = read_frame(s)
                    assert payload is not None
                    _, body = codec.decode_response(8, 8, payload)
                    assert {p["error_code"] for t in body["topics"] for p in t["partitions"]} == {0}
    finally:
        srv.stop()
    want = {f"load-{i}": {(t, p): i * 100 + k * 10 + p for k, t in enumerate(("a", "b")) for p in range(5)}
            for i in range(GROUPS)}
    for flag, parallel in (("0", True), ("-1", False)):
        srv = ServerProcess(data, "--offsets-load-worker-min-bytes", flag).start()
        try:
            srv.wait_loaded(60)
            line = next(x for x in srv.output if "offsets partitions (" in x)
            assert ("decoded by a second process" in line) == parallel, line
            assert f"({GROUPS * 10} records, 0 unavailable)" in line, line
            assert fetch_all(srv.port, range(GROUPS)) == want
        finally:
            srv.stop()
