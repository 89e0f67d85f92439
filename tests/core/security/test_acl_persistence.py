"""ACLs in ZooKeeper's shape (coordinator.core.security.acls): node paths, node JSON, change notifications;
exact strings as Kafka writes them (AclEntry.toJsonCompatibleMap, ZkAclStore, ZkAclChangeStore) and round
trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.core.security.acls import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    acl_change_path,
    acl_change_prefix,
    acl_node_path,
    decode_acl_change,
    decode_acl_node,
    encode_acl_change,
    encode_acl_node,
    operation_name,
    parse_acl_node_path,
    parse_operation_name,
    parse_permission_type_name,
    parse_resource_type_name,
    permission_type_name,
    resource_type_name,
)

Op, Perm, Res, Pat = AclOperation, AclPermissionType, ResourceType, PatternType


def test_node_json_exact() -> None:
    entry = AccessControlEntry("User:alice", "*", Op.READ, Perm.ALLOW)
    assert encode_acl_node([entry]) == (
        b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}')
    two = [AccessControlEntry("User:CN=broker1,OU=kafka", "10.0.0.1", Op.IDEMPOTENT_WRITE, Perm.DENY), entry]
    assert encode_acl_node(two) == (
        b'{"version":1,"acls":[{"principal":"User:CN=broker1,OU=kafka","permissionType":"Deny",'
        b'"operation":"IdempotentWrite","host":"10.0.0.1"},{"principal":"User:alice","permissionType":"Allow",'
        b'"operation":"Read","host":"*"}]}')
    assert decode_acl_node(encode_acl_node(two)) == tuple(two)
    assert encode_acl_node([]) == b'{"version":1,"acls":[]}'


def test_names_as_kafka_spells_them() -> None:
    assert [operation_name(op) for op in Op if op >= Op.ALL] == [
        "All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
        "AlterConfigs", "IdempotentWrite", "CreateTokens", "DescribeTokens"]
    assert [permission_type_name(p) for p in (Perm.ALLOW, Perm.DENY)] == ["Allow", "Deny"]
    assert [resource_type_name(t) for t in Res if t >= Res.TOPIC] == [
        "Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User"]


def test_names_parse_as_security_utils() -> None:
    assert parse_operation_name("ClusterAction") is Op.CLUSTER_ACTION
    assert parse_operation_name("CLUSTERACTION") is Op.CLUSTER_ACTION
    assert parse_operation_name("clusteraction") is Op.CLUSTER_ACTION  # upper-cased, then looked up
    assert parse_operation_name("CLUSTER_ACTION") is Op.UNKNOWN  # Kafka does not strip underscores
    assert parse_operation_name("Fly") is Op.UNKNOWN
    assert parse_permission_type_name("allow") is Perm.ALLOW and parse_permission_type_name("DENY") is Perm.DENY
    assert parse_resource_type_name("TransactionalId") is Res.TRANSACTIONAL_ID
    assert parse_resource_type_name("topic") is Res.TOPIC


def test_node_decoding() -> None:
    assert decode_acl_node(b"") == () and decode_acl_node(None) == ()
    data = b'{"version":1,"acls":[{"principal":"User:bob","permissionType":"ALLOW","operation":"describeConfigs",' \
           b'"host":"*"},{"host":"h","operation":"Teleport","permissionType":"Deny","principal":"User:x"}]}'
    assert decode_acl_node(data) == (AccessControlEntry("User:bob", "*", Op.DESCRIBE_CONFIGS, Perm.ALLOW),
                                     AccessControlEntry("User:x", "h", Op.UNKNOWN, Perm.DENY))
    for bad in (b'{"version":2,"acls":[]}', b'{"acls":[]}', b"[]", b'{"version":1}',
                b'{"version":1,"acls":[{"principal":"nocolon","permissionType":"Allow","operation":"Read",'
                b'"host":"*"}]}'):
        with pytest.raises(ValueError):
            decode_acl_node(bad)


def test_node_paths() -> None:
    cases = {
        ResourcePattern(Res.TOPIC, "orders", Pat.LITERAL): "/kafka-acl/Topic/orders",
        ResourcePattern(Res.TOPIC, "*", Pat.LITERAL): "/kafka-acl/Topic/*",
        ResourcePattern(Res.GROUP, "g-1", Pat.LITERAL): "/kafka-acl/Group/g-1",
        ResourcePattern(Res.CLUSTER, "kafka-cluster", Pat.LITERAL): "/kafka-acl/Cluster/kafka-cluster",
        ResourcePattern(Res.TRANSACTIONAL_ID, "tx", Pat.LITERAL): "/kafka-acl/TransactionalId/tx",
        ResourcePattern(Res.DELEGATION_TOKEN, "t", Pat.LITERAL): "/kafka-acl/DelegationToken/t",
        ResourcePattern(Res.USER, "CN=bob,O=x", Pat.LITERAL): "/kafka-acl/User/CN=bob,O=x",
        ResourcePattern(Res.TOPIC, "orders", Pat.PREFIXED): "/kafka-acl-extended/prefixed/Topic/orders",
        ResourcePattern(Res.GROUP, "_", Pat.PREFIXED): "/kafka-acl-extended/prefixed/Group/_",
    }
    for pattern, path in cases.items():
        assert acl_node_path(pattern) == path
        assert parse_acl_node_path(path) == pattern
    for bad in ("/kafka-acl/Topic", "/kafka-acl/Topic/", "/kafka-acl/Queue/x", "/kafka-acl-extended/Topic/x",
                "/other/Topic/x"):
        with pytest.raises(ValueError):
            parse_acl_node_path(bad)
    with pytest.raises(ValueError):
        acl_node_path(ResourcePattern(Res.TOPIC, "x", Pat.MATCH))


def test_change_notifications_exact() -> None:
    literal = ResourcePattern(Res.TOPIC, "orders", Pat.LITERAL)
    prefixed = ResourcePattern(Res.TOPIC, "orders", Pat.PREFIXED)
    assert acl_change_prefix(Pat.LITERAL) == "/kafka-acl-changes/acl_changes_"
    assert acl_change_prefix(Pat.PREFIXED) == "/kafka-acl-extended-changes/acl_changes_"
    assert acl_change_path(Pat.LITERAL, 42) == "/kafka-acl-changes/acl_changes_0000000042"
    assert acl_change_path(Pat.PREFIXED, 0) == "/kafka-acl-extended-changes/acl_changes_0000000000"
    assert encode_acl_change(literal) == b"TOPIC:orders"
    assert encode_acl_change(prefixed) == (
        b'{"version":1,"resourceType":"TOPIC","name":"orders","patternType":"PREFIXED"}')
    assert decode_acl_change(Pat.LITERAL, encode_acl_change(literal)) == literal
    assert decode_acl_change(Pat.PREFIXED, encode_acl_change(prefixed)) == prefixed


def test_change_notifications_read_any_case() -> None:
    for text, pattern in [(b"Topic:orders", ResourcePattern(Res.TOPIC, "orders", Pat.LITERAL)),
                          (b"topic:a:b", ResourcePattern(Res.TOPIC, "a:b", Pat.LITERAL)),
                          (b"TransactionalId:tx", ResourcePattern(Res.TRANSACTIONAL_ID, "tx", Pat.LITERAL)),
                          (b"TRANSACTIONAL_ID:tx", ResourcePattern(Res.TRANSACTIONAL_ID, "tx", Pat.LITERAL)),
                          (b"Cluster:kafka-cluster", ResourcePattern(Res.CLUSTER, "kafka-cluster", Pat.LITERAL))]:
        assert decode_acl_change(Pat.LITERAL, text) == pattern
    extended = b'{"version":1,"resourceType":"group","name":"g-","patternType":"prefixed"}'
    assert decode_acl_change(Pat.PREFIXED, extended) == ResourcePattern(Res.GROUP, "g-", Pat.PREFIXED)
    for store, bad in [(Pat.LITERAL, b"orders"), (Pat.LITERAL, b"Queue:x"),
                       (Pat.PREFIXED, b'{"version":2,"resourceType":"TOPIC","name":"x","patternType":"PREFIXED"}'),
                       (Pat.PREFIXED, b'{"version":1,"resourceType":"TOPIC","name":"x","patternType":"MATCH"}'),
                       (Pat.MATCH, b"TOPIC:x")]:
        with pytest.raises(ValueError):
            decode_acl_change(store, bad)


entries = st.builds(
    AccessControlEntry,
    st.builds(lambda t, n: f"{t}:{n}", st.sampled_from(["User", "Group"]), st.text(max_size=12)),
    st.one_of(st.just("*"), st.ip_addresses().map(str)),
    st.sampled_from([op for op in Op if op not in (Op.ANY, Op.UNKNOWN)]),
    st.sampled_from([Perm.ALLOW, Perm.DENY]))


@given(st.lists(entries, max_size=8, unique=True))
def test_node_round_trip(found: list[AccessControlEntry]) -> None:
    assert decode_acl_node(encode_acl_node(found)) == tuple(found)


@given(st.sampled_from([t for t in Res if t >= Res.TOPIC]), st.text(min_size=1).filter(lambda s: "/" not in s),
       st.sampled_from([Pat.LITERAL, Pat.PREFIXED]))
def test_path_and_change_round_trip(rt: ResourceType, name: str, pt: PatternType) -> None:
    pattern = ResourcePattern(rt, name, pt)
    assert parse_acl_node_path(acl_node_path(pattern)) == pattern
    assert decode_acl_change(pt, encode_acl_change(pattern)) == pattern
