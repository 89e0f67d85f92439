"""ACL filters, the index's add/list/remove and its version, and CreateAcls validation
(coordinator.core.security.acls), mirroring Kafka's AuthorizerTest (testAclManagementAPIs, testAclsFilter,
testGetAclsPrincipal, testAdd/DeleteAcls on literal, wildcard and prefixed resources,
testCreateAclWithInvalidResourceName) and AclBindingFilter/ResourcePatternFilter semantics."""

from __future__ import annotations

import pytest

from coordinator.core.security.acls import (
    ANY_FILTER,
    CLUSTER_NAME,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclIndex,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    validate_binding,
    validate_filter,
)

Op, Perm, Res, Pat = AclOperation, AclPermissionType, ResourceType, PatternType
ALLOW, DENY = Perm.ALLOW, Perm.DENY
ALICE = "User:alice"
ALLOW_READ = AccessControlEntry(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.READ, ALLOW)
ALLOW_WRITE = AccessControlEntry(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.WRITE, ALLOW)
DENY_READ = AccessControlEntry(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.READ, DENY)
LITERAL = ResourcePattern(Res.TOPIC, "foo-1234", Pat.LITERAL)
WILDCARD = ResourcePattern(Res.TOPIC, WILDCARD_RESOURCE, Pat.LITERAL)
PREFIXED = ResourcePattern(Res.TOPIC, "foo", Pat.PREFIXED)


def add(index: AclIndex, pattern: ResourcePattern, *entries: AccessControlEntry) -> None:
    for e in entries:
        index.add(AclBinding(pattern, e))


def on(index: AclIndex, pattern: ResourcePattern) -> set[AccessControlEntry]:
    return {b.entry for b in index.acls(AclBindingFilter(pattern.to_filter()))}


def pattern_filter(rt: ResourceType, name: str | None, pt: PatternType) -> AclBindingFilter:
    return AclBindingFilter(ResourcePatternFilter(rt, name, pt))


@pytest.mark.parametrize("pattern", [LITERAL, WILDCARD, PREFIXED])
def test_add_acls_is_additive_and_separate_per_pattern(pattern: ResourcePattern) -> None:
    index = AclIndex()
    add(index, pattern, ALLOW_READ, ALLOW_WRITE)
    add(index, pattern, ALLOW_WRITE, DENY_READ)
    assert on(index, pattern) == {ALLOW_READ, ALLOW_WRITE, DENY_READ}
    for other in {LITERAL, WILDCARD, PREFIXED} - {pattern}:
        assert on(index, other) == set()
    assert len(index) == 3


@pytest.mark.parametrize("pattern", [WILDCARD, PREFIXED])
def test_delete_one_and_all_acls(pattern: ResourcePattern) -> None:
    index = AclIndex()
    add(index, pattern, ALLOW_READ, ALLOW_WRITE)
    assert index.remove(AclBinding(pattern, ALLOW_READ).to_filter()) == [AclBinding(pattern, ALLOW_READ)]
    assert on(index, pattern) == {ALLOW_WRITE}
    add(index, pattern, ALLOW_READ)
    assert len(index.remove(AclBindingFilter(pattern.to_filter()))) == 2
    assert index.acls() == [] and len(index) == 0 and index.patterns() == ()


def test_version_changes_on_every_change_and_only_then() -> None:
    index = AclIndex()
    v0 = index.version
    assert index.add(AclBinding(LITERAL, ALLOW_READ)) is True
    v1 = index.version
    assert v1 != v0
    assert index.add(AclBinding(LITERAL, ALLOW_READ)) is False  # an identical binding is not duplicated
    assert index.version == v1 and len(index) == 1
    assert index.remove(AclBinding(LITERAL, ALLOW_WRITE).to_filter()) == []
    assert index.version == v1
    index.remove(ANY_FILTER)
    assert index.version not in (v0, v1)
    v2 = index.version
    assert index.replace(LITERAL, [ALLOW_READ, DENY_READ]) is True and index.version != v2
    v3 = index.version
    assert index.replace(LITERAL, [DENY_READ, ALLOW_READ]) is False and index.version == v3
    assert index.replace(LITERAL, [DENY_READ]) is True and on(index, LITERAL) == {DENY_READ}
    assert index.replace(LITERAL, []) is True and len(index) == 0


def test_acl_management_apis() -> None:
    index = AclIndex()
    bob = "User:bob"
    acl1 = AccessControlEntry(ALICE, "host1", Op.READ, ALLOW)
    acl2 = AccessControlEntry(ALICE, "host1", Op.WRITE, ALLOW)
    acl3 = AccessControlEntry(bob, "host2", Op.READ, ALLOW)
    acl4 = AccessControlEntry(bob, "host2", Op.WRITE, ALLOW)
    acl5 = AccessControlEntry(bob, WILDCARD_HOST, Op.READ, ALLOW)
    add(index, LITERAL, acl1, acl2, acl3, acl4, acl5)

    def by_principal(principal: str) -> set[AclBinding]:
        return set(index.acls(AclBindingFilter(entry=AccessControlEntryFilter(principal=principal))))

    assert by_principal(ALICE) == {AclBinding(LITERAL, e) for e in (acl1, acl2)}
    assert by_principal(bob) == {AclBinding(LITERAL, e) for e in (acl3, acl4, acl5)}
    more = {ResourcePattern(Res.TOPIC, WILDCARD_RESOURCE, Pat.LITERAL): {acl5},
            ResourcePattern(Res.CLUSTER, WILDCARD_RESOURCE, Pat.LITERAL): {AccessControlEntry(bob, "host1", Op.READ,
                                                                                             ALLOW)},
            ResourcePattern(Res.GROUP, WILDCARD_RESOURCE, Pat.LITERAL): {acl1, acl2, acl3, acl4, acl5},
            ResourcePattern(Res.GROUP, "test-ConsumerGroup", Pat.LITERAL): {acl1, acl2, acl3, acl4, acl5}}
    for pattern, entries in more.items():
        add(index, pattern, *entries)
    expected = {AclBinding(p, e) for p, es in {**more, LITERAL: {acl1, acl2, acl3, acl4, acl5}}.items() for e in es}
    assert set(index.acls()) == expected
    index.remove(AclBinding(LITERAL, acl1).to_filter())
    index.remove(AclBinding(LITERAL, acl5).to_filter())
    assert on(index, LITERAL) == {acl2, acl3, acl4}
    index.remove(AclBindingFilter(LITERAL.to_filter()))
    assert on(index, LITERAL) == set()


def test_get_acls_by_principal_is_exact() -> None:
    index = AclIndex()
    specific = AccessControlEntry(ALICE, WILDCARD_HOST, Op.WRITE, ALLOW)
    add(index, LITERAL, specific)
    wildcard_filter = AclBindingFilter(entry=AccessControlEntryFilter(principal=WILDCARD_PRINCIPAL))
    alice_filter = AclBindingFilter(entry=AccessControlEntryFilter(principal=ALICE))
    assert index.acls(wildcard_filter) == []
    assert len(index.acls(alice_filter)) == 1
    index.remove(AclBindingFilter(LITERAL.to_filter()))
    add(index, LITERAL, AccessControlEntry(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.WRITE, ALLOW))
    assert len(index.acls(wildcard_filter)) == 1
    assert index.acls(alice_filter) == []


def test_acls_filter_and_delete_attribution() -> None:
    index = AclIndex()
    r1 = ResourcePattern(Res.TOPIC, "foo-1", Pat.LITERAL)
    r2 = ResourcePattern(Res.TOPIC, "bar-1", Pat.LITERAL)
    prefixed = ResourcePattern(Res.TOPIC, "bar-", Pat.PREFIXED)
    acl1 = AclBinding(r1, AccessControlEntry(ALICE, WILDCARD_HOST, Op.READ, ALLOW))
    acl2 = AclBinding(r1, AccessControlEntry(ALICE, "192.168.0.1", Op.WRITE, ALLOW))
    acl3 = AclBinding(r2, AccessControlEntry(ALICE, WILDCARD_HOST, Op.DESCRIBE, ALLOW))
    acl4 = AclBinding(prefixed, AccessControlEntry(WILDCARD_PRINCIPAL, WILDCARD_HOST, Op.READ, ALLOW))
    for b in (acl1, acl2, acl3, acl4):
        index.add(b)
    assert set(index.acls(ANY_FILTER)) == {acl1, acl2, acl3, acl4}
    assert set(index.acls(AclBindingFilter(r1.to_filter()))) == {acl1, acl2}
    assert set(index.acls(AclBindingFilter(prefixed.to_filter()))) == {acl4}
    matching = pattern_filter(Res.ANY, r2.name, Pat.MATCH)
    assert set(index.acls(matching)) == {acl3, acl4}
    results = index.remove_all([matching, acl1.to_filter(), AclBindingFilter(r2.to_filter()),
                                pattern_filter(Res.TOPIC, "baz", Pat.ANY)])
    # the ZooKeeper authorizer gives a binding to the first filter matching it: filter 2 gets nothing
    assert [set(r) for r in results] == [{acl3, acl4}, {acl1}, set(), set()]
    assert index.acls() == [acl2]


def test_pattern_filters() -> None:
    index = AclIndex()
    lit = ResourcePattern(Res.TOPIC, "orders", Pat.LITERAL)
    star = ResourcePattern(Res.TOPIC, WILDCARD_RESOURCE, Pat.LITERAL)
    pre_o = ResourcePattern(Res.TOPIC, "o", Pat.PREFIXED)
    pre_orders = ResourcePattern(Res.TOPIC, "orders", Pat.PREFIXED)
    pre_x = ResourcePattern(Res.TOPIC, "x", Pat.PREFIXED)
    other_lit = ResourcePattern(Res.TOPIC, "order", Pat.LITERAL)
    group = ResourcePattern(Res.GROUP, "orders", Pat.LITERAL)
    group_star = ResourcePattern(Res.GROUP, WILDCARD_RESOURCE, Pat.LITERAL)
    all_patterns = [lit, star, pre_o, pre_orders, pre_x, other_lit, group, group_star]
    for p in all_patterns:
        add(index, p, ALLOW_READ)

    def patterns(f: AclBindingFilter) -> set[ResourcePattern]:
        found = {b.pattern for b in index.acls(f)}
        assert found == {p for p in all_patterns if f.pattern.matches(p)}  # the index agrees with matches()
        return found

    assert patterns(ANY_FILTER) == set(all_patterns)
    assert patterns(pattern_filter(Res.TOPIC, None, Pat.ANY)) == {lit, star, pre_o, pre_orders, pre_x, other_lit}
    assert patterns(pattern_filter(Res.ANY, None, Pat.PREFIXED)) == {pre_o, pre_orders, pre_x}
    assert patterns(pattern_filter(Res.ANY, None, Pat.LITERAL)) == {lit, star, other_lit, group, group_star}
    assert patterns(pattern_filter(Res.ANY, None, Pat.MATCH)) == set(all_patterns)  # MATCH with no name: any
    assert patterns(pattern_filter(Res.TOPIC, "orders", Pat.LITERAL)) == {lit}
    assert patterns(pattern_filter(Res.TOPIC, "orders", Pat.PREFIXED)) == {pre_orders}
    assert patterns(pattern_filter(Res.TOPIC, "orders", Pat.ANY)) == {lit, pre_orders}
    assert patterns(pattern_filter(Res.TOPIC, "orders", Pat.MATCH)) == {lit, star, pre_o, pre_orders}
    assert patterns(pattern_filter(Res.ANY, "orders", Pat.MATCH)) == {lit, star, pre_o, pre_orders, group,
                                                                       group_star}
    assert patterns(pattern_filter(Res.TOPIC, "*", Pat.LITERAL)) == {star}  # "*" as a name is exact here
    assert patterns(pattern_filter(Res.TOPIC, "*", Pat.MATCH)) == {star}
    assert patterns(pattern_filter(Res.TOPIC, "xylophone", Pat.MATCH)) == {star, pre_x}
    assert patterns(pattern_filter(Res.TOPIC, "ord", Pat.ANY)) == set()
    assert patterns(pattern_filter(Res.CLUSTER, None, Pat.ANY)) == set()


def test_entry_filters() -> None:
    e = AccessControlEntry(ALICE, "10.0.0.1", Op.READ, ALLOW)
    assert AccessControlEntryFilter().matches(e)
    assert AccessControlEntryFilter(ALICE, "10.0.0.1", Op.READ, ALLOW).matches(e)
    assert not AccessControlEntryFilter(principal="User:Alice").matches(e)  # case-sensitive
    assert not AccessControlEntryFilter(host=WILDCARD_HOST).matches(e)  # "*" is exact in a filter
    assert not AccessControlEntryFilter(operation=Op.ALL).matches(e)
    assert not AccessControlEntryFilter(operation=Op.DESCRIBE).matches(e)  # no implications in filters
    assert not AccessControlEntryFilter(permission_type=DENY).matches(e)
    assert AccessControlEntryFilter(operation=Op.ANY, permission_type=Perm.ANY).matches(e)


def test_wire_codes_become_enums() -> None:
    b = AclBinding(ResourcePattern(2, "t", 4), AccessControlEntry(ALICE, "*", 3, 3))
    assert b.pattern.resource_type is Res.TOPIC and b.pattern.pattern_type is Pat.PREFIXED
    assert b.entry.operation is Op.READ and b.entry.permission_type is ALLOW
    assert ResourcePattern(99, "t", 3).resource_type is Res.UNKNOWN  # fromCode: unknown codes are UNKNOWN
    assert b == AclBinding(ResourcePattern(Res.TOPIC, "t", Pat.PREFIXED), AccessControlEntry(ALICE, "*", Op.READ,
                                                                                            ALLOW))


def test_index_refuses_what_kafka_cannot_construct() -> None:
    index = AclIndex()
    for bad in (AclBinding(ResourcePattern(Res.ANY, "t", Pat.LITERAL), ALLOW_READ),
                AclBinding(ResourcePattern(Res.TOPIC, "t", Pat.MATCH), ALLOW_READ),
                AclBinding(ResourcePattern(Res.TOPIC, "t", Pat.ANY), ALLOW_READ),
                AclBinding(LITERAL, AccessControlEntry(ALICE, "*", Op.ANY, ALLOW)),
                AclBinding(LITERAL, AccessControlEntry(ALICE, "*", Op.READ, Perm.ANY))):
        with pytest.raises(ValueError):
            index.add(bad)
    assert len(index) == 0 and index.version == 0


# --- CreateAcls validation ----------------------------------------------------------------------------------

def check(rt: ResourceType, name: str, pt: PatternType = Pat.LITERAL, principal: str = ALICE,
          op: AclOperation = Op.READ, perm: AclPermissionType = ALLOW, **kw: bool) -> AclError | None:
    return validate_binding(AclBinding(ResourcePattern(rt, name, pt), AccessControlEntry(principal, "*", op, perm)),
                            **kw)


def test_valid_bindings() -> None:
    assert check(Res.TOPIC, "orders") is None
    assert check(Res.TOPIC, "*") is None
    assert check(Res.TOPIC, "ord", Pat.PREFIXED, op=Op.ALL, perm=DENY) is None
    assert check(Res.CLUSTER, CLUSTER_NAME, op=Op.IDEMPOTENT_WRITE) is None
    assert check(Res.GROUP, "g", principal="User:") is None  # Kafka only asks for the colon
    assert check(Res.USER, "bob", op=Op.CREATE_TOKENS) is None
    assert check(Res.DELEGATION_TOKEN, "tok", op=Op.DESCRIBE) is None
    assert check(Res.TRANSACTIONAL_ID, "tx", op=Op.WRITE) is None


@pytest.mark.parametrize(("binding", "message"), [
    (dict(rt=Res.TOPIC, name="test/1"), "ACL binding contains invalid resource name: test/1"),
    (dict(rt=Res.TOPIC, name=""), "Invalid empty resource name"),
    (dict(rt=Res.CLUSTER, name="my-cluster", op=Op.ALTER),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (dict(rt=Res.CLUSTER, name="*", op=Op.ALTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (dict(rt=Res.ANY, name="t"), "Invalid resourceType ANY"),
    (dict(rt=Res.UNKNOWN, name="t"), "Invalid resourceType UNKNOWN"),
    (dict(rt=Res.TOPIC, name="t", pt=Pat.MATCH), "Invalid patternType MATCH"),
    (dict(rt=Res.TOPIC, name="t", pt=Pat.ANY), "Invalid patternType ANY"),
    (dict(rt=Res.TOPIC, name="t", pt=Pat.UNKNOWN), "Invalid patternType UNKNOWN"),
    (dict(rt=Res.TOPIC, name="t", op=Op.ANY), "Invalid operation ANY"),
    (dict(rt=Res.TOPIC, name="t", op=Op.UNKNOWN), "Invalid operation UNKNOWN"),
    (dict(rt=Res.TOPIC, name="t", perm=Perm.ANY), "Invalid permissionType ANY"),
    (dict(rt=Res.TOPIC, name="t", principal="alice"),
     "Could not parse principal from `alice` (no colon is present separating the principal type from the "
     "principal name)"),
    (dict(rt=Res.GROUP, name="g", op=Op.WRITE), "ResourceType GROUP only supports operations READ,DESCRIBE,DELETE,ALL"),
    (dict(rt=Res.TOPIC, name="t", op=Op.IDEMPOTENT_WRITE),
     "ResourceType TOPIC only supports operations READ,WRITE,CREATE,DESCRIBE,DELETE,ALTER,DESCRIBE_CONFIGS,"
     "ALTER_CONFIGS,ALL"),
    (dict(rt=Res.CLUSTER, name=CLUSTER_NAME, op=Op.READ),
     "ResourceType CLUSTER only supports operations CREATE,CLUSTER_ACTION,DESCRIBE_CONFIGS,ALTER_CONFIGS,"
     "IDEMPOTENT_WRITE,ALTER,DESCRIBE,ALL"),
])
def test_invalid_bindings(binding: dict, message: str) -> None:
    assert check(**binding) == AclError(42, message)


def test_operation_check_can_be_left_to_the_broker_rules() -> None:
    assert check(Res.GROUP, "g", op=Op.WRITE, check_operation=False) is None
    assert check(Res.GROUP, "a/b", op=Op.WRITE, check_operation=False) is not None


def test_filter_validation() -> None:
    assert validate_filter(ANY_FILTER) is None
    assert validate_filter(pattern_filter(Res.TOPIC, "x", Pat.MATCH)) is None
    assert validate_filter(pattern_filter(Res.UNKNOWN, None, Pat.ANY)) == AclError(42, "Unknown patternFilter.")
    assert validate_filter(pattern_filter(Res.ANY, None, Pat.UNKNOWN)) == AclError(42, "Unknown patternFilter.")
    assert validate_filter(AclBindingFilter(entry=AccessControlEntryFilter(operation=Op.UNKNOWN))) == AclError(
        42, "Unknown entryFilter.")
