"""The authorizer's decisions (coordinator.core.security.acls), mirroring Kafka's AuthorizerTest and
BaseAuthorizerTest (AclAuthorizer): deny precedence, super users, wildcards, no-ACL default, implications,
prefixed ACLs, authorizeByResourceType, authorized operations; plus a property: the indexed decision equals
a brute-force evaluation of the rules over every ACL."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.security.acls import (
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclIndex,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_super_users,
)

Op, Perm, Res, Pat = AclOperation, AclPermissionType, ResourceType, PatternType
ALLOW, DENY = Perm.ALLOW, Perm.DENY
ALICE = "User:alice"
HOST = "192.168.0.1"
TOPIC = ResourcePattern(Res.TOPIC, "foo-1234", Pat.LITERAL)
WILDCARD_TOPIC = ResourcePattern(Res.TOPIC, WILDCARD_RESOURCE, Pat.LITERAL)
PREFIXED_FOO = ResourcePattern(Res.TOPIC, "foo", Pat.PREFIXED)
CLUSTER = ResourcePattern(Res.CLUSTER, "kafka-cluster", Pat.LITERAL)
SUPER_USERS = parse_super_users("User:superuser1; User:superuser2")
VALID_OPS = [op for op in AclOperation if op not in (Op.ANY, Op.UNKNOWN)]

ALLOW_READ = AccessControlEntry(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.READ, ALLOW)
ALLOW_WRITE = AccessControlEntry(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.WRITE, ALLOW)
DENY_READ = AccessControlEntry(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.READ, DENY)


def ace(principal: str, host: str, op: AclOperation, perm: AclPermissionType) -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, perm)


class World:
    def __init__(self, allow_everyone: bool = False) -> None:
        self.index = AclIndex()
        self.authorizer = Authorizer(self.index, SUPER_USERS, allow_everyone)

    def add(self, pattern: ResourcePattern, *entries: AccessControlEntry) -> None:
        for e in entries:
            self.index.add(AclBinding(pattern, e))

    def remove(self, pattern: ResourcePattern, *entries: AccessControlEntry) -> None:
        for e in entries:
            self.index.remove(AclBinding(pattern, e).to_filter())

    def ok(self, principal: str, host: str, op: AclOperation, pattern: ResourcePattern) -> bool:
        assert pattern.pattern_type == Pat.LITERAL
        return self.authorizer.authorize(principal, host, op, pattern.resource_type, pattern.name)

    def by_type(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType) -> bool:
        return self.authorizer.authorize_by_resource_type(principal, host, op, resource_type)


@pytest.fixture
def w() -> World:
    return World()


def test_topic_acl(w: World) -> None:
    user1, user2, user3 = ALICE, "User:rob", "User:batman"
    host1, host2 = "192.168.1.1", "192.168.1.2"
    w.add(TOPIC,
          ace(user1, host1, Op.READ, ALLOW), ace(user1, host2, Op.READ, ALLOW), ace(user1, host1, Op.READ, DENY),
          ace(user1, host1, Op.WRITE, ALLOW), ace(user1, WILDCARD_HOST, Op.DESCRIBE, ALLOW),
          ace(user2, WILDCARD_HOST, Op.READ, ALLOW), ace(user3, WILDCARD_HOST, Op.WRITE, ALLOW))
    assert w.ok(user1, host2, Op.READ, TOPIC)
    assert not w.ok(user1, host1, Op.READ, TOPIC)  # the DENY from host1
    assert w.ok(user1, host1, Op.WRITE, TOPIC)
    assert not w.ok(user1, host2, Op.WRITE, TOPIC)
    assert w.ok(user1, host1, Op.DESCRIBE, TOPIC)
    assert w.ok(user1, host2, Op.DESCRIBE, TOPIC)
    assert not w.ok(user1, host1, Op.ALTER, TOPIC)
    assert not w.ok(user1, host2, Op.ALTER, TOPIC)
    assert w.ok(user2, host1, Op.DESCRIBE, TOPIC)  # READ implies DESCRIBE
    assert w.ok(user3, host1, Op.DESCRIBE, TOPIC)  # WRITE implies DESCRIBE
    assert w.ok(user2, host1, Op.READ, TOPIC)
    assert w.ok(user3, host1, Op.WRITE, TOPIC)


def test_deny_takes_precedence(w: World) -> None:
    host = "192.168.2.1"
    w.add(TOPIC, ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.ALL, ALLOW), ace(ALICE, host, Op.ALL, DENY))
    assert not w.ok(ALICE, host, Op.READ, TOPIC)
    assert w.ok(ALICE, "10.0.0.1", Op.READ, TOPIC)  # the DENY names one host


def test_allow_all_access(w: World) -> None:
    w.add(TOPIC, ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.ALL, ALLOW))
    assert w.ok("User:random", "192.0.4.4", Op.READ, TOPIC)


def test_super_user_has_access_whatever_the_acls(w: World) -> None:
    w.add(TOPIC, ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.ALL, DENY))
    assert w.ok("User:superuser1", "192.0.4.4", Op.READ, TOPIC)
    assert w.ok("User:superuser2", "192.0.4.4", Op.READ, TOPIC)
    assert not w.ok("User:superuser3", "192.0.4.4", Op.READ, TOPIC)
    assert not w.ok("user:superuser1", "192.0.4.4", Op.READ, TOPIC)  # principal types are case-sensitive
    assert w.authorizer.authorized_operations("User:superuser1", "h", Res.GROUP, "g") == (1 << 3) | (1 << 6) | (
        1 << 8)


def test_wildcard_acls(w: World) -> None:
    host1 = "192.168.3.1"
    assert not w.ok(ALICE, host1, Op.READ, TOPIC)  # fail closed with no ACL
    w.add(WILDCARD_TOPIC, ace(ALICE, host1, Op.READ, ALLOW))
    assert w.ok(ALICE, host1, Op.READ, TOPIC)
    w.add(TOPIC, ace(ALICE, host1, Op.WRITE, ALLOW))
    w.add(WILDCARD_TOPIC, ace(ALICE, host1, Op.WRITE, DENY))  # DENY on every topic wins over the literal ALLOW
    assert not w.ok(ALICE, host1, Op.WRITE, TOPIC)


def test_wildcard_principal(w: World) -> None:
    w.add(TOPIC, ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.READ, ALLOW))
    assert w.ok("User:anyone", HOST, Op.READ, TOPIC)
    assert w.ok("Group:admins", HOST, Op.READ, TOPIC)  # "User:*" matches every principal, whatever its type
    w2 = World()
    w2.add(TOPIC, ace("Group:*", WILDCARD_HOST, Op.READ, ALLOW))
    assert not w2.ok("Group:admins", HOST, Op.READ, TOPIC)  # "Group:*" is not a wildcard
    assert w2.ok("Group:*", HOST, Op.READ, TOPIC)


def test_wildcard_host(w: World) -> None:
    w.add(TOPIC, ace(ALICE, WILDCARD_HOST, Op.READ, ALLOW), ace(ALICE, "10.0.0.9", Op.READ, DENY))
    assert w.ok(ALICE, "10.0.0.1", Op.READ, TOPIC)
    assert w.ok(ALICE, "::1", Op.READ, TOPIC)
    assert not w.ok(ALICE, "10.0.0.9", Op.READ, TOPIC)


def test_no_acl_found_denies_by_default(w: World) -> None:
    assert not w.ok(ALICE, HOST, Op.READ, TOPIC)


def test_no_acl_found_override() -> None:
    w = World(allow_everyone=True)
    assert w.ok(ALICE, HOST, Op.READ, TOPIC)
    w.add(TOPIC, ace("User:bob", WILDCARD_HOST, Op.READ, ALLOW))  # now ACLs exist for it: only bob
    assert not w.ok(ALICE, HOST, Op.READ, TOPIC)
    assert w.ok(ALICE, HOST, Op.READ, ResourcePattern(Res.TOPIC, "other", Pat.LITERAL))
    w.add(WILDCARD_TOPIC, ace("User:bob", WILDCARD_HOST, Op.READ, DENY))  # the wildcard matches every topic
    assert not w.ok(ALICE, HOST, Op.READ, ResourcePattern(Res.TOPIC, "other", Pat.LITERAL))


def test_authorize_with_empty_resource_name(w: World) -> None:
    group = ResourcePattern(Res.GROUP, "", Pat.LITERAL)
    assert not w.ok(ALICE, HOST, Op.READ, group)
    w.add(ResourcePattern(Res.GROUP, WILDCARD_RESOURCE, Pat.LITERAL), ALLOW_READ)
    assert w.ok(ALICE, HOST, Op.READ, group)


def _implications_of_allow(parent: AclOperation, implied: set[AclOperation]) -> None:
    w = World()
    w.add(CLUSTER, ace(ALICE, WILDCARD_HOST, parent, ALLOW))
    for op in VALID_OPS:
        assert w.ok(ALICE, "192.168.3.1", op, CLUSTER) == (op in implied or op == parent), (parent, op)


def _implications_of_deny(parent: AclOperation, denied: set[AclOperation]) -> None:
    w = World()
    w.add(CLUSTER, ace(ALICE, WILDCARD_HOST, parent, DENY), ace(ALICE, WILDCARD_HOST, Op.ALL, ALLOW))
    for op in VALID_OPS:
        assert w.ok(ALICE, "192.168.3.1", op, CLUSTER) == (op not in denied and op != parent), (parent, op)


def test_acl_inheritance() -> None:
    everything = set(VALID_OPS) - {Op.ALL}
    _implications_of_allow(Op.ALL, everything)
    _implications_of_deny(Op.ALL, everything)
    _implications_of_allow(Op.READ, {Op.DESCRIBE})
    _implications_of_allow(Op.WRITE, {Op.DESCRIBE})
    _implications_of_allow(Op.DELETE, {Op.DESCRIBE})
    _implications_of_allow(Op.ALTER, {Op.DESCRIBE})
    _implications_of_deny(Op.DESCRIBE, set())
    _implications_of_allow(Op.ALTER_CONFIGS, {Op.DESCRIBE_CONFIGS})
    _implications_of_deny(Op.DESCRIBE_CONFIGS, set())
    _implications_of_allow(Op.CREATE, set())
    _implications_of_allow(Op.DESCRIBE, set())  # DESCRIBE implies nothing upward


def test_deny_describe_does_not_deny_read(w: World) -> None:
    w.add(TOPIC, ace(ALICE, WILDCARD_HOST, Op.READ, ALLOW), ace(ALICE, WILDCARD_HOST, Op.DESCRIBE, DENY))
    assert w.ok(ALICE, HOST, Op.READ, TOPIC)
    assert not w.ok(ALICE, HOST, Op.DESCRIBE, TOPIC)


def test_access_allowed_by_wildcard_or_prefixed_resource(w: World) -> None:
    w.add(WILDCARD_TOPIC, ALLOW_READ)
    assert w.ok(ALICE, HOST, Op.READ, TOPIC)
    w2 = World()
    w2.add(PREFIXED_FOO, ALLOW_READ)
    assert w2.ok(ALICE, HOST, Op.READ, TOPIC)
    assert not w2.ok(ALICE, HOST, Op.READ, ResourcePattern(Res.TOPIC, "fo", Pat.LITERAL))
    assert w2.ok(ALICE, HOST, Op.READ, ResourcePattern(Res.TOPIC, "foo", Pat.LITERAL))  # the whole name
    assert not w2.ok(ALICE, HOST, Op.READ, ResourcePattern(Res.GROUP, "foo-1", Pat.LITERAL))  # other type


def test_authorize_with_prefixed_resource(w: World) -> None:
    for name, pattern_type in [("a_other", Pat.LITERAL), ("a_other", Pat.PREFIXED), ("foo-zz1", Pat.PREFIXED),
                               ("foo-zz2", Pat.PREFIXED), ("foo-zz3-zzz", Pat.PREFIXED),
                               ("fooo-zz", Pat.PREFIXED), ("fo-zz", Pat.PREFIXED), ("fop-zz", Pat.PREFIXED),
                               ("fon-zz", Pat.PREFIXED), ("fon-", Pat.PREFIXED), ("z_other", Pat.PREFIXED),
                               ("z_other", Pat.LITERAL)]:
        w.add(ResourcePattern(Res.TOPIC, name, pattern_type), DENY_READ)
    w.add(PREFIXED_FOO, ALLOW_READ)
    assert w.ok(ALICE, HOST, Op.READ, TOPIC)
    assert not w.ok(ALICE, HOST, Op.READ, ResourcePattern(Res.TOPIC, "foo-zz1-x", Pat.LITERAL))


def test_single_character_resource_acls(w: World) -> None:
    w.add(ResourcePattern(Res.TOPIC, "f", Pat.LITERAL), ALLOW_READ)
    assert w.ok(ALICE, HOST, Op.READ, ResourcePattern(Res.TOPIC, "f", Pat.LITERAL))
    assert not w.ok(ALICE, HOST, Op.READ, ResourcePattern(Res.TOPIC, "foo", Pat.LITERAL))
    w.add(ResourcePattern(Res.TOPIC, "_", Pat.PREFIXED), ALLOW_READ)
    assert w.ok(ALICE, HOST, Op.READ, ResourcePattern(Res.TOPIC, "_foo", Pat.LITERAL))
    assert w.ok(ALICE, HOST, Op.READ, ResourcePattern(Res.TOPIC, "_", Pat.LITERAL))
    assert not w.ok(ALICE, HOST, Op.READ, ResourcePattern(Res.TOPIC, "foo_", Pat.LITERAL))


def test_decisions_follow_removals(w: World) -> None:
    w.add(PREFIXED_FOO, ALLOW_READ)
    w.add(TOPIC, DENY_READ)
    assert not w.ok(ALICE, HOST, Op.READ, TOPIC)
    w.remove(TOPIC, DENY_READ)
    assert w.ok(ALICE, HOST, Op.READ, TOPIC)
    w.remove(PREFIXED_FOO, ALLOW_READ)
    assert not w.ok(ALICE, HOST, Op.READ, TOPIC)
    assert len(w.index) == 0


def test_parse_super_users() -> None:
    assert parse_super_users("User:admin;User:CN=broker1,OU=kafka") == {"User:admin", "User:CN=broker1,OU=kafka"}
    assert parse_super_users(" User:a ; User:b;") == {"User:a", "User:b"}
    assert parse_super_users("") == frozenset() and parse_super_users(None) == frozenset()
    assert parse_super_users("User:a:b") == {"User:a:b"}  # split at the first colon
    for bad in ("admin", "User:a;;User:b", "User:a; ;User:b"):
        with pytest.raises(ValueError):
            parse_super_users(bad)


# --- authorizeByResourceType (BaseAuthorizerTest) ----------------------------------------------------------

U1, U2 = "User:user1", "User:user2"
H1, H2 = "192.168.1.1", "192.168.1.2"


def test_by_type_multiple_add_and_remove(w: World) -> None:
    r1 = ResourcePattern(Res.TOPIC, "sb1-x", Pat.LITERAL)
    deny_read, allow_read = ace(U1, H1, Op.READ, DENY), ace(U1, H1, Op.READ, ALLOW)
    for _ in range(3):
        assert not w.by_type(U1, H1, Op.READ, Res.TOPIC)
        w.add(r1, allow_read)
        assert w.by_type(U1, H1, Op.READ, Res.TOPIC)
        for _ in range(3):
            w.add(r1, deny_read)
            assert not w.by_type(U1, H1, Op.READ, Res.TOPIC)
            w.remove(r1, deny_read)
            w.add(r1, allow_read)
            assert w.by_type(U1, H1, Op.READ, Res.TOPIC)
        w.remove(r1, allow_read)
        assert not w.by_type(U1, H1, Op.READ, Res.TOPIC)


def test_by_type_isolation_unrelated_deny_wont_dominate_allow(w: World) -> None:
    r1 = ResourcePattern(Res.TOPIC, "sb1-x", Pat.LITERAL)
    r2 = ResourcePattern(Res.TOPIC, "sb2-x", Pat.LITERAL)
    r3 = ResourcePattern(Res.GROUP, "s", Pat.PREFIXED)
    w.add(r1, ace(U1, H1, Op.READ, DENY), ace(U2, H1, Op.READ, DENY), ace(U1, H2, Op.WRITE, DENY),
          ace(U2, H2, Op.READ, DENY), ace(U1, H2, Op.READ, ALLOW))
    w.add(r2, ace(U1, H2, Op.READ, DENY))
    w.add(r3, ace(U1, H2, Op.READ, DENY))
    assert not w.by_type(U1, H1, Op.READ, Res.TOPIC)
    assert not w.by_type(U1, H1, Op.READ, Res.GROUP)
    assert not w.by_type(U1, H1, Op.READ, Res.TRANSACTIONAL_ID)
    assert not w.by_type(U1, H1, Op.READ, Res.CLUSTER)
    assert w.by_type(U1, H2, Op.READ, Res.TOPIC)


def test_by_type_deny_takes_precedence(w: World) -> None:
    r1 = ResourcePattern(Res.TOPIC, "sb1-x", Pat.LITERAL)
    w.add(r1, ace(U1, H1, Op.WRITE, ALLOW))
    assert w.by_type(U1, H1, Op.WRITE, Res.TOPIC)
    w.add(r1, ace(U1, H1, Op.WRITE, DENY))
    assert not w.by_type(U1, H1, Op.WRITE, Res.TOPIC)


def test_by_type_prefixed_resource_deny_dominates(w: World) -> None:
    allow, deny = ace(U1, H1, Op.READ, ALLOW), ace(U1, H1, Op.READ, DENY)

    def group(prefix: str) -> ResourcePattern:
        return ResourcePattern(Res.GROUP, prefix, Pat.PREFIXED)

    w.add(group("abcde"), allow)
    assert w.by_type(U1, H1, Op.READ, Res.GROUP)
    w.add(group("abcd"), deny)
    assert not w.by_type(U1, H1, Op.READ, Res.GROUP)
    w.add(group("abc"), allow)
    assert w.by_type(U1, H1, Op.READ, Res.GROUP)
    w.add(group("a"), deny)
    assert not w.by_type(U1, H1, Op.READ, Res.GROUP)
    w.add(group("ab"), allow)
    assert not w.by_type(U1, H1, Op.READ, Res.GROUP)


def test_by_type_wildcard_resource_deny_dominates(w: World) -> None:
    allow, deny = ace(U1, H1, Op.WRITE, ALLOW), ace(U1, H1, Op.WRITE, DENY)
    wildcard = ResourcePattern(Res.GROUP, WILDCARD_RESOURCE, Pat.LITERAL)
    w.add(ResourcePattern(Res.GROUP, "hello", Pat.PREFIXED), allow)
    assert w.by_type(U1, H1, Op.WRITE, Res.GROUP)
    w.add(wildcard, deny)
    assert not w.by_type(U1, H1, Op.WRITE, Res.GROUP)
    w.add(wildcard, allow)
    assert not w.by_type(U1, H1, Op.WRITE, Res.GROUP)
    w.add(ResourcePattern(Res.GROUP, "aloha", Pat.LITERAL), allow)
    assert not w.by_type(U1, H1, Op.WRITE, Res.GROUP)


def test_by_type_literal_deny_dominates_only_its_name(w: World) -> None:
    a, b = ResourcePattern(Res.TOPIC, "a", Pat.LITERAL), ResourcePattern(Res.TOPIC, "b", Pat.LITERAL)
    w.add(a, ace(U1, H1, Op.WRITE, ALLOW), ace(U1, H1, Op.WRITE, DENY))
    assert not w.by_type(U1, H1, Op.WRITE, Res.TOPIC)
    w.add(b, ace(U1, H1, Op.WRITE, ALLOW))
    assert w.by_type(U1, H1, Op.WRITE, Res.TOPIC)
    w.add(ResourcePattern(Res.TOPIC, "b", Pat.PREFIXED), ace(U1, H1, Op.WRITE, DENY))  # a prefix of "b"
    assert not w.by_type(U1, H1, Op.WRITE, Res.TOPIC)
    w.add(WILDCARD_TOPIC, ace(U1, H1, Op.WRITE, ALLOW))  # a wildcard ALLOW is never dominated but by "*" DENY
    assert w.by_type(U1, H1, Op.WRITE, Res.TOPIC)


def test_by_type_with_all_operation_ace(w: World) -> None:
    r1 = ResourcePattern(Res.TOPIC, "sb1-x", Pat.LITERAL)
    assert not w.by_type(U1, H1, Op.READ, Res.TOPIC)
    w.add(r1, ace(U1, H1, Op.WRITE, DENY), ace(U1, H1, Op.ALL, ALLOW))
    assert w.by_type(U1, H1, Op.READ, Res.TOPIC)
    w.add(r1, ace(U1, H1, Op.ALL, DENY))
    assert not w.by_type(U1, H1, Op.READ, Res.TOPIC)


def test_by_type_with_all_host_ace(w: World) -> None:
    r1 = ResourcePattern(Res.TOPIC, "sb1-x", Pat.LITERAL)
    r2 = ResourcePattern(Res.TOPIC, "sb2-x", Pat.LITERAL)
    assert not w.by_type(U1, H1, Op.READ, Res.TOPIC)
    w.add(r1, ace(U1, H1, Op.READ, ALLOW))
    assert w.by_type(U1, H1, Op.READ, Res.TOPIC)
    w.add(r1, ace(U1, WILDCARD_HOST, Op.READ, DENY))
    assert not w.by_type(U1, H1, Op.READ, Res.TOPIC)
    w.add(r2, ace(U1, H1, Op.READ, DENY))
    assert not w.by_type(U1, H1, Op.READ, Res.TOPIC)
    assert not w.by_type(U1, H2, Op.READ, Res.TOPIC)
    w.add(r2, ace(U1, WILDCARD_HOST, Op.READ, ALLOW))
    assert w.by_type(U1, H2, Op.READ, Res.TOPIC)
    w.add(r2, ace(U1, WILDCARD_HOST, Op.READ, DENY))
    assert not w.by_type(U1, H2, Op.READ, Res.TOPIC)


def test_by_type_with_all_principal_ace(w: World) -> None:
    r1 = ResourcePattern(Res.TOPIC, "sb1-x", Pat.LITERAL)
    r2 = ResourcePattern(Res.TOPIC, "sb2-x", Pat.LITERAL)
    assert not w.by_type(U1, H1, Op.READ, Res.TOPIC)
    w.add(r1, ace(U1, H1, Op.READ, ALLOW))
    assert w.by_type(U1, H1, Op.READ, Res.TOPIC)
    w.add(r1, ace(WILDCARD_PRINCIPAL, H1, Op.READ, DENY))
    assert not w.by_type(U1, H1, Op.READ, Res.TOPIC)
    w.add(r2, ace(U1, H1, Op.READ, DENY))
    assert not w.by_type(U1, H1, Op.READ, Res.TOPIC)
    assert not w.by_type(U2, H1, Op.READ, Res.TOPIC)
    w.add(r2, ace(WILDCARD_PRINCIPAL, H1, Op.READ, ALLOW))
    assert w.by_type(U2, H1, Op.READ, Res.TOPIC)
    w.add(r2, ace(WILDCARD_PRINCIPAL, H1, Op.READ, DENY))
    assert not w.by_type(U2, H1, Op.READ, Res.TOPIC)


def test_by_type_super_user_has_access(w: World) -> None:
    deny_all = ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.ALL, DENY)
    for rt in (Res.TOPIC, Res.CLUSTER, Res.GROUP, Res.TRANSACTIONAL_ID):
        w.add(ResourcePattern(rt, WILDCARD_RESOURCE, Pat.LITERAL), deny_all)
    for rt in (Res.TOPIC, Res.CLUSTER, Res.GROUP, Res.TRANSACTIONAL_ID):
        assert w.by_type("User:superuser1", "192.0.4.4", Op.READ, rt)
        assert not w.by_type(ALICE, "192.0.4.4", Op.READ, rt)


def test_by_type_allow_everyone_if_no_acl_found() -> None:
    w = World(allow_everyone=True)
    assert w.by_type(ALICE, HOST, Op.READ, Res.TOPIC)
    deny_all_read = ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.READ, DENY)
    w.add(TOPIC, deny_all_read)
    assert w.by_type(ALICE, HOST, Op.READ, Res.TOPIC)  # the deny is on one topic only
    w.add(WILDCARD_TOPIC, deny_all_read)
    assert not w.by_type(ALICE, HOST, Op.READ, Res.TOPIC)


def test_by_type_has_no_implications(w: World) -> None:
    w.add(TOPIC, ace(U1, H1, Op.READ, ALLOW))
    assert w.ok(U1, H1, Op.DESCRIBE, TOPIC)
    assert not w.by_type(U1, H1, Op.DESCRIBE, Res.TOPIC)  # Kafka's resource cache looks up the op and All


def test_by_type_rejects_filter_arguments(w: World) -> None:
    for op, rt in [(Op.READ, Res.ANY), (Op.READ, Res.UNKNOWN), (Op.ANY, Res.TOPIC), (Op.UNKNOWN, Res.TOPIC)]:
        with pytest.raises(ValueError):
            w.by_type(ALICE, HOST, op, rt)


# --- authorized operations --------------------------------------------------------------------------------

def bits(*ops: AclOperation) -> int:
    return sum(1 << int(op) for op in set(ops))


def test_authorized_operations(w: World) -> None:
    ops = w.authorizer.authorized_operations
    assert ops(ALICE, HOST, Res.TOPIC, TOPIC.name) == 0
    w.add(TOPIC, ace(ALICE, WILDCARD_HOST, Op.READ, ALLOW))
    assert ops(ALICE, HOST, Res.TOPIC, TOPIC.name) == bits(Op.READ, Op.DESCRIBE)
    w.add(TOPIC, ace(ALICE, WILDCARD_HOST, Op.ALTER_CONFIGS, ALLOW), ace(ALICE, HOST, Op.DESCRIBE, DENY))
    assert ops(ALICE, HOST, Res.TOPIC, TOPIC.name) == bits(Op.READ, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS)
    w.add(TOPIC, ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.ALL, ALLOW))
    everything = bits(*SUPPORTED_OPERATIONS[Res.TOPIC])
    assert everything == 3576  # All itself (bit 2) is never in the field
    assert ops(ALICE, HOST, Res.TOPIC, TOPIC.name) == everything & ~bits(Op.DESCRIBE)
    assert ops("User:bob", HOST, Res.TOPIC, TOPIC.name) == everything
    assert ops("User:superuser1", HOST, Res.TOPIC, TOPIC.name) == everything
    assert ops(ALICE, HOST, Res.GROUP, "g") == 0
    assert World(allow_everyone=True).authorizer.authorized_operations(ALICE, HOST, Res.GROUP, "g") == bits(
        Op.READ, Op.DESCRIBE, Op.DELETE)
    w.add(CLUSTER, ace(ALICE, WILDCARD_HOST, Op.ALL, ALLOW))
    assert ops(ALICE, HOST, Res.CLUSTER, "kafka-cluster") == 8096
    with pytest.raises(ValueError):
        ops(ALICE, HOST, Res.ANY, "x")


# --- the indexed decision equals the rules applied to every ACL --------------------------------------------

NAMES = ["a", "ab", "abc", "b", "ba", "*", "_", "_a"]
PRINCIPALS = ["User:alice", "User:bob", WILDCARD_PRINCIPAL, "Group:alice"]
HOSTS = ["10.0.0.1", "10.0.0.2", WILDCARD_HOST]
OPS = [Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS]
TYPES = [Res.TOPIC, Res.GROUP]

bindings = st.builds(
    lambda rt, name, pt, p, h, op, perm: AclBinding(ResourcePattern(rt, name, pt), AccessControlEntry(p, h, op, perm)),
    st.sampled_from(TYPES), st.sampled_from(NAMES), st.sampled_from([Pat.LITERAL, Pat.PREFIXED]),
    st.sampled_from(PRINCIPALS), st.sampled_from(HOSTS), st.sampled_from(OPS), st.sampled_from([ALLOW, DENY]))
queries = st.tuples(st.sampled_from(["User:alice", "User:bob", "Group:alice", "User:superuser1"]),
                    st.sampled_from(HOSTS[:2]), st.sampled_from(OPS), st.sampled_from(TYPES),
                    st.sampled_from([*NAMES, "abcd", "c"]))


def brute_force(acls: list[AclBinding], principal: str, host: str, op: AclOperation, rt: ResourceType, name: str,
                allow_everyone: bool) -> bool:
    """The rules, read straight: super user; the matching ACLs; none -> the default; a DENY wins; an ALLOW
    (with the implications) is needed."""
    if principal in SUPER_USERS:
        return True
    matching = [b.entry for b in acls if b.pattern.resource_type == rt and (
        (b.pattern.pattern_type == Pat.LITERAL and b.pattern.name in (name, WILDCARD_RESOURCE))
        or (b.pattern.pattern_type == Pat.PREFIXED and name.startswith(b.pattern.name)))]
    if not matching:
        return allow_everyone

    def applies(e: AccessControlEntry) -> bool:
        return e.principal in (principal, WILDCARD_PRINCIPAL) and e.host in (host, WILDCARD_HOST)

    if any(applies(e) and e.permission_type == DENY and e.operation in (op, Op.ALL) for e in matching):
        return False
    granting = {op, Op.ALL}
    if op == Op.DESCRIBE:
        granting |= {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}
    if op == Op.DESCRIBE_CONFIGS:
        granting |= {Op.ALTER_CONFIGS}
    return any(applies(e) and e.permission_type == ALLOW and e.operation in granting for e in matching)


@settings(max_examples=300, deadline=None)
@given(st.lists(bindings, max_size=12), st.lists(queries, min_size=1, max_size=10), st.booleans(),
       st.integers(min_value=0, max_value=11))
def test_indexed_decision_equals_brute_force(acls: list[AclBinding], asked: list[tuple], allow_everyone: bool,
                                             removals: int) -> None:
    index = AclIndex(acls)
    for b in acls[:removals:2]:  # some removals too, so the index's bookkeeping is exercised
        index.remove(b.to_filter())
    kept = index.acls()
    assert set(kept) == {b for b in acls if b in index}
    authorizer = Authorizer(index, SUPER_USERS, allow_everyone)
    for principal, host, op, rt, name in asked:
        expected = brute_force(kept, principal, host, op, rt, name, allow_everyone)
        assert authorizer.authorize(principal, host, op, rt, name) == expected
        field = authorizer.authorized_operations(principal, host, rt, name)
        assert field == sum(1 << int(o) for o in SUPPORTED_OPERATIONS[rt]
                            if brute_force(kept, principal, host, o, rt, name, allow_everyone))
