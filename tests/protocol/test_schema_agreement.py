"""Our declarative schemas (protocol.messages) agree with Apache Kafka's JSON message schemas.

The story: for every API in ``ALL`` and every version we serve that Kafka's JSON still covers, both trees
are flattened into one row per field present in that version -- path, snake_case name, type ("[]" for an
array of structs, "struct" for a nested struct), nullable, tag (None when not tagged) and the default an
encoder writes -- and the two lists must be equal. Non-tagged fields keep their order; tagged fields follow
their struct's non-tagged fields, sorted by tag. The request/response flexible flag must match Kafka's
flexibleVersions. Versions the JSON no longer covers (KIP-896's removals: Produce 0-2, the ACL APIs' v0,
...) are checked for names, order and types against kafka-python's legacy hand-written schemas, except
those whose fields the JSON still declares (WriteTxnMarkers v0), compared with the JSON's rows. A last group
of tests breaks a declaration on purpose (rename, drop, reorder, wrong range, wrong tag) and shows the
comparison catches it.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from protocol.messages import ALL
from protocol.schema import OURS_FROM_TAG, ApiSchema, Field, Versions

# Located without importing kafka-python (its import loads every schema and warns).
_KAFKA = importlib.util.find_spec("kafka")
assert _KAFKA is not None and _KAFKA.origin is not None, "kafka-python is a test dependency"
RESOURCES = Path(_KAFKA.origin).parent / "protocol" / "schemas" / "resources"

SERVED = {
    0: ("Produce", "0-11"), 1: ("Fetch", "4-17"), 2: ("ListOffsets", "0-9"), 3: ("Metadata", "0-13"),
    8: ("OffsetCommit", "0-9"), 9: ("OffsetFetch", "0-9"), 10: ("FindCoordinator", "0-6"),
    11: ("JoinGroup", "0-9"), 12: ("Heartbeat", "0-4"), 13: ("LeaveGroup", "0-5"),
    14: ("SyncGroup", "0-5"), 15: ("DescribeGroups", "0-6"), 16: ("ListGroups", "0-5"),
    18: ("ApiVersions", "0-4"), 19: ("CreateTopics", "0-7"), 20: ("DeleteTopics", "0-6"),
    22: ("InitProducerId", "0-5"), 23: ("OffsetForLeaderEpoch", "2-4"), 37: ("CreatePartitions", "0-3"),
    42: ("DeleteGroups", "0-2"),
    32: ("DescribeConfigs", "0-4"), 33: ("AlterConfigs", "0-2"), 44: ("IncrementalAlterConfigs", "0-1"),
    47: ("OffsetDelete", "0"),
    17: ("SaslHandshake", "0-1"), 36: ("SaslAuthenticate", "0-2"),
    29: ("DescribeAcls", "0-3"), 30: ("CreateAcls", "0-3"), 31: ("DeleteAcls", "0-3"),
    50: ("DescribeUserScramCredentials", "0"), 51: ("AlterUserScramCredentials", "0"),
    # declared, not served yet (no handler, so ApiVersions does not list them)
    68: ("ConsumerGroupHeartbeat", "0-1"), 69: ("ConsumerGroupDescribe", "0-1"),
    # transactions (Kafka 3.9, no TV2): declared, not served yet. AddPartitionsToTxn: the client form only.
    24: ("AddPartitionsToTxn", "0-3"), 25: ("AddOffsetsToTxn", "0-4"), 26: ("EndTxn", "0-4"),
    27: ("WriteTxnMarkers", "0-1"), 28: ("TxnOffsetCommit", "0-4"), 61: ("DescribeProducers", "0"),
    65: ("DescribeTransactions", "0"), 66: ("ListTransactions", "0-1"),
}

# APIs whose JSON kafka-python 3.0.12 does not ship: tests/protocol/test_consumer_group_messages.py checks
# them against hand-built bytes derived from Kafka's JSON instead.
NO_JSON_IN_KAFKA_PYTHON = {"ConsumerGroupHeartbeat", "ConsumerGroupDescribe"}

# Versions we serve that Kafka 4.x's JSON dropped (KIP-896); checked against kafka-python's old schemas.
NOT_IN_JSON = {("Produce", 0), ("Produce", 1), ("Produce", 2), ("DescribeConfigs", 0),
               ("ListOffsets", 0), ("OffsetCommit", 0), ("OffsetCommit", 1), ("OffsetFetch", 0),
               ("CreateTopics", 0), ("CreateTopics", 1), ("DeleteTopics", 0),
               ("DescribeAcls", 0), ("CreateAcls", 0), ("DeleteAcls", 0)}
# Versions Kafka 4.x dropped from validVersions whose fields its JSON still declares ("0+"), and which
# kafka-python has no legacy schema for: compared with the JSON's fields like any covered version.
# WriteTxnMarkers v0 is v1 without flexible encoding (Kafka 3.9's JSON: validVersions 0-1, flexible 1+);
# tests/protocol/test_txn_messages.py also checks its bytes by hand.
DROPPED_BUT_DESCRIBED = {("WriteTxnMarkers", 0)}
LEGACY_MODULE = {"Produce": "produce", "DescribeConfigs": "admin", "ListOffsets": "list_offsets",
                 "OffsetCommit": "commit", "OffsetFetch": "commit", "CreateTopics": "admin", "DeleteTopics": "admin",
                 "DescribeAcls": "admin", "CreateAcls": "admin", "DeleteAcls": "admin"}

Row = tuple[str, str, bool, int | None, Any]  # path, type, nullable, tag, default


# --- Kafka's JSON --------------------------------------------------------------------------------------

def strip_comments(text: str) -> str:
    """Drop // comments outside string literals (Kafka's JSON files carry a licence header in them)."""
    out: list[str] = []
    i, in_string = 0, False
    while i < len(text):
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def load_kafka(message: str) -> dict[str, Any]:
    return json.loads(strip_comments((RESOURCES / f"{message}.json").read_text()))


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def kafka_type(field: dict[str, Any]) -> str:
    t: str = field["type"]
    if t.startswith("[]"):
        return "[]" if t[2:3].isupper() else t
    return "struct" if t[:1].isupper() else t


ZEROS: dict[str, Any] = {"bool": False, "string": "", "bytes": b"", "records": b""}


def normal_default(type_: str, value: Any) -> Any:
    """The default an encoder writes, or None when it is the type's zero (or null)."""
    if value == "null":
        value = None
    elif isinstance(value, str) and type_ not in ("string", "bytes", "records"):
        if type_ == "bool":
            value = value == "true"
        else:
            value = int(value, 0)
    if value is None or type_ in ("[]", "struct") or type_.startswith("[]"):
        return None
    zero = ZEROS.get(type_, 0)
    return None if value == zero and type(value) is type(zero) else value


def kafka_rows(fields: list[dict[str, Any]], structs: dict[str, Any], v: int, prefix: str = "") -> list[Row]:
    present = [x for x in fields if v in Versions.parse(x["versions"])]
    tagged = sorted((x for x in present if _kafka_tag(x, v) is not None), key=lambda x: x["tag"])
    rows: list[Row] = []
    for x in [x for x in present if _kafka_tag(x, v) is None] + tagged:
        t = kafka_type(x)
        path = prefix + snake(x["name"]) + ("[]" if t == "[]" else "")
        nullable = v in Versions.parse(x.get("nullableVersions"))
        rows.append((path, t, nullable, _kafka_tag(x, v), normal_default(t, x.get("default"))))
        if t in ("[]", "struct"):
            children = x.get("fields") or structs[x["type"].removeprefix("[]")]
            rows += kafka_rows(children, structs, v, path + ".")
    return rows


def _kafka_tag(x: dict[str, Any], v: int) -> int | None:
    return x["tag"] if "tag" in x and v in Versions.parse(x.get("taggedVersions")) else None


# --- our declarations ----------------------------------------------------------------------------------

def our_rows(fields: tuple[Field, ...], v: int, prefix: str = "") -> list[Row]:
    present = [x for x in fields if x.present_in(v) and not (x.tagged_in(v) and (x.tag or 0) >= OURS_FROM_TAG)]
    tagged = sorted((x for x in present if x.tagged_in(v)), key=lambda x: x.tag or 0)
    rows: list[Row] = []
    for x in [x for x in present if not x.tagged_in(v)] + tagged:
        path = prefix + x.name + ("[]" if x.type == "[]" else "")
        tag = x.tag if x.tagged_in(v) else None
        rows.append((path, x.type, x.nullable_in(v), tag, normal_default(x.type, x.default)))
        if x.is_struct_like:
            rows += our_rows(x.fields, v, path + ".")
    return rows


def covered(schema: ApiSchema) -> list[int]:
    if schema.name in NO_JSON_IN_KAFKA_PYTHON:
        return []
    valid = Versions.parse(load_kafka(schema.name + "Request")["validVersions"])
    return [v for v in range(schema.min_version, schema.max_version + 1)
            if v in valid or (schema.name, v) in DROPPED_BUT_DESCRIBED]


def side_rows(schema: ApiSchema, side: str, v: int) -> tuple[list[Row], list[Row]]:
    doc = load_kafka(schema.name + side.capitalize())
    structs = {s["name"]: s["fields"] for s in doc.get("commonStructs", [])}
    ours = getattr(schema, side)
    return our_rows(ours, v), kafka_rows(doc["fields"], structs, v)


CASES = [(s.name, v) for s in ALL.values() for v in covered(s)]
BY_NAME = {s.name: s for s in ALL.values()}


# --- the agreement -------------------------------------------------------------------------------------

def test_every_served_api_is_declared_with_exactly_our_range() -> None:
    assert {k: (s.name, s.valid) for k, s in ALL.items()} == SERVED


def test_only_the_versions_kafka_4_dropped_escape_the_json_check() -> None:
    served = {(s.name, v) for s in ALL.values() for v in range(s.min_version, s.max_version + 1)
              if s.name not in NO_JSON_IN_KAFKA_PYTHON}
    assert served - set(CASES) == NOT_IN_JSON


def _field_ranges(fields: list[dict[str, Any]], structs: dict[str, Any]) -> list[str]:
    out = []
    for x in fields:
        out.append(x["versions"])
        children = x.get("fields") or structs.get(x["type"].removeprefix("[]"), [])
        out += _field_ranges(children, structs)
    return out


@pytest.mark.parametrize(("name", "version"), sorted(DROPPED_BUT_DESCRIBED))
def test_dropped_but_described_versions_have_the_new_baselines_fields(name: str, version: int) -> None:
    """Each lies below kafka-python's validVersions, and the JSON gives it exactly the fields of the new
    lowest version (so the rows compared for it are not an artefact of ranges Kafka stopped maintaining)."""
    for side in ("Request", "Response"):
        doc = load_kafka(name + side)
        baseline = Versions.parse(doc["validVersions"]).lo
        assert version < baseline
        structs = {x["name"]: x["fields"] for x in doc.get("commonStructs", [])}
        for spec in _field_ranges(doc["fields"], structs):
            assert (version in Versions.parse(spec)) == (baseline in Versions.parse(spec)), f"{side} {spec}"


@pytest.mark.parametrize("name", sorted(set(BY_NAME) - NO_JSON_IN_KAFKA_PYTHON))
def test_api_key_and_flexible_versions_match_kafka(name: str) -> None:
    schema = BY_NAME[name]
    for side in ("Request", "Response"):
        doc = load_kafka(name + side)
        assert doc["apiKey"] == schema.key
        flexible = Versions.parse(doc["flexibleVersions"])
        for v in covered(schema):
            assert schema.is_flexible(v) == (v in flexible), f"{name}{side} v{v} flexible"


def assert_same_rows(ours: list[Row], theirs: list[Row], where: str) -> None:
    """Equal row lists; on failure the message names the first field that differs."""
    for i, (mine, kafkas) in enumerate(zip(ours, theirs)):
        assert mine == kafkas, f"{where} field #{i}: ours {mine} != Kafka {kafkas}"
    assert ours[len(theirs):] == [], f"{where}: fields Kafka does not have"
    assert theirs[len(ours):] == [], f"{where}: fields we lack"


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_request_fields_match_kafka(name: str, version: int) -> None:
    ours, theirs = side_rows(BY_NAME[name], "request", version)
    assert_same_rows(ours, theirs, f"{name}Request v{version}")


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_response_fields_match_kafka(name: str, version: int) -> None:
    ours, theirs = side_rows(BY_NAME[name], "response", version)
    assert_same_rows(ours, theirs, f"{name}Response v{version}")


# --- versions the JSON dropped: kafka-python's legacy schemas ------------------------------------------

def legacy_rows(schema: Any, prefix: str = "") -> list[tuple[str, str]]:
    from kafka.protocol.old import types as t

    prim = {t.Int8: "int8", t.Int16: "int16", t.Int32: "int32", t.Int64: "int64", t.Bytes: "bytes",
            t.Boolean: "bool"}
    rows: list[tuple[str, str]] = []
    for name, kind in zip(schema.names, schema.fields):
        if isinstance(kind, t.Array) and isinstance(kind.array_of, t.Schema):
            rows.append((prefix + name + "[]", "[]"))
            rows += legacy_rows(kind.array_of, prefix + name + "[].")
        elif isinstance(kind, t.Array):
            rows.append((prefix + name, "[]" + _legacy_prim(kind.array_of, prim)))
        else:
            rows.append((prefix + name, _legacy_prim(kind, prim)))
    return rows


def _legacy_prim(kind: Any, prim: dict[Any, str]) -> str:
    from kafka.protocol.old import types as t

    return "string" if isinstance(kind, t.String) else prim[kind]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # importing kafka-python loads its schemas
@pytest.mark.parametrize(("name", "version"), sorted(NOT_IN_JSON))
def test_versions_missing_from_json_match_kafka_python_legacy_schemas(name: str, version: int) -> None:
    legacy = importlib.import_module(f"kafka.protocol.old.{LEGACY_MODULE[name]}")
    schema = BY_NAME[name]
    for side in ("request", "response"):
        cls = getattr(legacy, f"{name}{side.capitalize()}_v{version}")
        ours = [(p, "bytes" if ty == "records" else ty) for p, ty, *_ in our_rows(getattr(schema, side), version)]
        assert ours == legacy_rows(cls.SCHEMA), f"{name}{side} v{version}"
        assert not schema.is_flexible(version)


# --- the comparison can fail ---------------------------------------------------------------------------

def _edit(fields: tuple[Field, ...], target: str, **changes: Any) -> tuple[Field, ...]:
    return tuple(dataclasses.replace(x, **changes) if x.name == target else x for x in fields)


def _mismatched_versions(schema: ApiSchema, side: str) -> list[int]:
    """The covered versions in which our rows differ from Kafka's."""
    mismatched = []
    for v in covered(schema):
        ours, theirs = side_rows(schema, side, v)
        if ours != theirs:
            mismatched.append(v)
    return mismatched


BROKEN = {
    "renamed": lambda s: _edit(s.request, "member_id", name="memberid"),
    "dropped": lambda s: tuple(x for x in s.request if x.name != "protocol_type"),
    "reordered": lambda s: (s.request[1], s.request[0], *s.request[2:]),
    # Kafka: group_instance_id from v5; declaring it from v4 adds a field to v4 only.
    "wrong range": lambda s: _edit(s.request, "group_instance_id", versions="4+", nullable="4+"),
    "not nullable": lambda s: _edit(s.request, "reason", nullable=None),
    "wrong type": lambda s: _edit(s.request, "session_timeout_ms", type="int64"),
    "wrong default": lambda s: _edit(s.request, "rebalance_timeout_ms", default=None),
}
ALL_JOIN_GROUP = list(range(10))
EXPECTED_MISMATCH = {
    "renamed": ALL_JOIN_GROUP, "dropped": ALL_JOIN_GROUP, "reordered": ALL_JOIN_GROUP,
    "wrong range": [4], "not nullable": [8, 9], "wrong type": ALL_JOIN_GROUP,
    "wrong default": list(range(1, 10)),
}


@pytest.mark.parametrize("how", sorted(BROKEN))
def test_a_broken_join_group_declaration_is_caught(how: str) -> None:
    schema = BY_NAME["JoinGroup"]
    broken = dataclasses.replace(schema, request=BROKEN[how](schema))
    assert _mismatched_versions(schema, "request") == []
    assert _mismatched_versions(broken, "request") == EXPECTED_MISMATCH[how]


def test_a_wrong_tag_in_a_flexible_version_is_caught() -> None:
    schema = BY_NAME["ApiVersions"]
    broken = dataclasses.replace(schema, response=_edit(schema.response, "zk_migration_ready", tag=4))
    ours, theirs = side_rows(broken, "response", 3)
    assert ("zk_migration_ready", "bool", False, 4, None) in ours
    assert ours != theirs
