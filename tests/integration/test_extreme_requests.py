"""Any value a field's type allows gets an answer, never a handler traceback (issue #23's sweep).

For every API and version we serve, requests are built from our own schemas with each integer at its
type's extremes (and -1, 0), strings and bytes empty, null or long, arrays empty or repeated, and sent to
the real server over TCP. Each must be answered, or left waiting (a long poll, a join), or closed cleanly:
the server log must never show a handler failure, and afterwards the server still serves a group.
Deterministic sweeps (every field at its minimum, every field at its maximum) come first; hypothesis then
mixes extremes per field.
"""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_process import ServerProcess, raw_exchange  # type: ignore[import-not-found]

from protocol import codec
from protocol.messages import ALL
from protocol.schema import Field

INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
UINT_RANGES = {"uint16": 16, "uint32": 32}
LONG = "x" * 32767  # the longest non-flexible string
FAILURE_MARKS = ("Traceback", "handler for api", "failed; closing it")


def extremes(field: Field, version: int) -> list[Any]:
    """The values a field of this type can take at its edges."""
    t = field.element_type if field.is_array else field.type
    if t in INT_RANGES:
        bits = INT_RANGES[t]
        values: list[Any] = [-(2 ** (bits - 1)), 2 ** (bits - 1) - 1, -1, 0]
    elif t in UINT_RANGES:
        values = [0, 2 ** UINT_RANGES[t] - 1]
    elif t == "float64":
        values = [0.0, -1.7e308, 1.7e308]
    elif t == "bool":
        values = [False, True]
    elif t == "string":
        values = ["", LONG, "g"]
    elif t in ("bytes", "records"):
        values = [b"", b"\xff" * 4096]
    elif t == "uuid":
        values = [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]
    else:
        raise AssertionError(f"no extremes for {t}")
    if field.nullable_in(version) and not field.is_array:
        values.append(None)
    return values


def body_strategy(fields: tuple[Field, ...], version: int) -> st.SearchStrategy[dict[str, Any]]:
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for fld in fields:
        if not fld.present_in(version):
            continue
        if fld.is_struct_like:
            element = body_strategy(fld.fields, version)
            if fld.type == "struct":
                parts[fld.name] = element
                continue
            items: st.SearchStrategy[Any] = st.lists(element, min_size=0, max_size=3)
        elif fld.is_array:
            items = st.lists(st.sampled_from(extremes(fld, version)), min_size=0, max_size=3)
        else:
            parts[fld.name] = st.sampled_from(extremes(fld, version))
            continue
        if fld.nullable_in(version):
            items = st.one_of(st.none(), items)
        parts[fld.name] = items
    return st.fixed_dictionaries(parts)


def edge_body(fields: tuple[Field, ...], version: int, pick: int) -> dict[str, Any]:
    """Every field at one edge: ``pick`` 0 = each type's minimum, 1 = its maximum (arrays of two)."""
    out: dict[str, Any] = {}
    for fld in fields:
        if not fld.present_in(version):
            continue
        if fld.is_struct_like:
            element = edge_body(fld.fields, version, pick)
            out[fld.name] = element if fld.type == "struct" else [element, element]
        elif fld.is_array:
            out[fld.name] = [extremes(fld, version)[pick]] * 2
        else:
            out[fld.name] = extremes(fld, version)[pick]
    return out


def send(port: int, api_key: int, version: int, body: dict[str, Any], wait: float = 0.5,
         client_id: str | None = "extremes") -> str:
    """'answered', 'closed' or 'waiting' (no answer within ``wait``: a long poll or a join may wait)."""
    frame = codec.encode_request(api_key, version, 7, client_id, body)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(frame)
        s.settimeout(wait)
        try:
            head = s.recv(4)
        except TimeoutError:
            return "waiting"
        except ConnectionResetError:
            return "closed"
        if len(head) < 4:
            return "closed"
        assert struct.unpack(">i", head)[0] >= 4
        return "answered"


def call(port: int, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    payload = raw_exchange(port, codec.encode_request(api_key, version, 9, "extremes", body))
    return codec.decode_response(api_key, version, payload)[1]


SERVED = [(key, v) for key, schema in sorted(ALL.items())
          for v in range(schema.min_version, schema.max_version + 1)]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("extremes") / "data", "--group-initial-rebalance-delay-ms", "0",
                      "--group-min-session-timeout-ms", "1000", "--num-partitions", "1").start().wait_loaded()
    try:
        yield s
    finally:
        s.stop()


def failures(log: str) -> list[str]:
    return [line for line in log.splitlines() if any(m in line for m in FAILURE_MARKS)]


def test_every_field_at_its_minimum_then_its_maximum(srv: ServerProcess) -> None:
    # the request header's client id at its edges too: null with the minimums, 32767 bytes with the maximums
    jobs = [(key, v, edge_body(ALL[key].request, v, pick), 0.5, (None, LONG)[pick])
            for key, v in SERVED for pick in (0, 1)]
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(lambda j: send(srv.port, *j), jobs))
    assert srv.alive()
    assert failures(srv.log()) == [], "\n".join(failures(srv.log())[:20])
    answered = sum(o == "answered" for o in outcomes)
    assert answered >= len(jobs) // 2, f"only {answered} of {len(jobs)} edge requests were answered"


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_mixed_extremes(srv: ServerProcess, data: st.DataObject) -> None:
    key, version = data.draw(st.sampled_from(SERVED))
    body = data.draw(body_strategy(ALL[key].request, version))
    send(srv.port, key, version, body, wait=0.2)
    assert failures(srv.log()) == [], f"api {key} v{version}:\n" + "\n".join(failures(srv.log())[:20])


def test_a_group_still_works_afterwards(srv: ServerProcess) -> None:
    """Runs last (file order): after every extreme request, a kafka-python consumer group joins, reads,
    commits and reads its commit back."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    p = KafkaProducer(bootstrap_servers=srv.bootstrap)
    for i in range(5):
        p.send("after-extremes", b"v%d" % i)
    p.flush(10)
    p.close()
    c = KafkaConsumer("after-extremes", bootstrap_servers=srv.bootstrap, group_id="after-extremes",
                      auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        got = []
        for m in c:
            got.append(m.value)
            if len(got) == 5:
                break
        c.commit()
        assert got == [b"v%d" % i for i in range(5)]
        assert c.committed(TopicPartition("after-extremes", 0)) == 5
    finally:
        c.close()
    assert failures(srv.log()) == []


def test_offset_commit_with_extreme_retention_is_answered(srv: ServerProcess) -> None:
    """OffsetCommit v2-v4 with retention_time_ms at int64's edges: answered, stored, and the partition is
    not left 'unstable' for OffsetFetch with require_stable (v7)."""
    for v in (2, 3, 4):
        for retention in (2**63 - 1, -(2**63)):
            group = f"far-{v}-{retention > 0}"
            body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                    "retention_time_ms": retention,
                    "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 42,
                                                              "committed_metadata": "m"}]}]}
            resp = call(srv.port, 8, v, body)
            assert resp["topics"][0]["partitions"][0]["error_code"] == 0, (v, retention, resp)
            fetched = call(srv.port, 9, 7, {"group_id": group, "require_stable": True,
                                           "topics": [{"name": "t", "partition_indexes": [0]}]})
            part = fetched["topics"][0]["partitions"][0]
            assert part["error_code"] == 0, (v, retention, part)
            if retention > 0:
                assert part["committed_offset"] == 42, part
    assert failures(srv.log()) == []



def test_a_member_with_the_longest_client_id_joins(srv: ServerProcess) -> None:
    """A new member's id is made from its client id: a 32767-byte client id must still give an id that the
    JoinGroup answer and the group's log record can carry."""
    body = {"group_id": "long-client", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}],
            "reason": None}
    first = codec.decode_response(11, 5, raw_exchange(srv.port, codec.encode_request(11, 5, 1, LONG, body)))[1]
    assert first["error_code"] == 79 and first["member_id"].startswith("x" * 100)  # MEMBER_ID_REQUIRED
    body["member_id"] = first["member_id"]
    joined = codec.decode_response(11, 5, raw_exchange(srv.port, codec.encode_request(11, 5, 2, LONG, body)))[1]
    assert (joined["error_code"], joined["generation_id"]) == (0, 1), joined
    assert failures(srv.log()) == []
