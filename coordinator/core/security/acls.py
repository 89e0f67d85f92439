"""ACLs and the authorizer's decisions, sans-IO, as Apache Kafka's ``AclAuthorizer`` (ZooKeeper mode) makes
them: the model, validation (CreateAcls), filters (DescribeAcls, DeleteAcls), the in-memory index, the
decisions, and the ZooKeeper JSON the runtime persists them in.

Rules:
- A binding is a resource pattern (resource type, name, pattern type LITERAL or PREFIXED; the LITERAL name
  ``*`` is the wildcard of its type) and an entry (principal ``Type:name``, host, operation, ALLOW or DENY).
  Principals are compared as exact strings (type and name case-sensitive, as ``KafkaPrincipal.equals``);
  ``User:*`` is the only wildcard principal (an ACL for it applies to every principal, whatever its type)
  and ``*`` the only wildcard host (Kafka's ``AclEntry``).
- ``Authorizer.authorize(principal, host, operation, resource_type, name)`` (``authorizeAction``):
  1. a super user (``super.users``) is allowed, whatever the ACLs (DENY included);
  2. the matching ACLs are those on the LITERAL name, on the LITERAL ``*`` of that type, and on every PREFIXED
     pattern whose prefix the name starts with (the whole name included);
  3. none at all (for anyone) -> allowed iff ``allow.everyone.if.no.acl.found`` (default false);
  4. a matching DENY whose principal is the caller's or ``User:*``, host the caller's or ``*`` and operation
     the one asked or All -> denied: DENY wins, and implies nothing but through All (DENY Describe does not
     deny Read);
  5. else allowed iff such an ALLOW exists for an operation implying the one asked: itself or All; Describe is
     also implied by Read, Write, Delete and Alter; DescribeConfigs by AlterConfigs.
- ``authorize_by_resource_type(principal, host, op, resource_type)`` (KIP-679, InitProducerId: "Write on any
  Topic"; ``AclAuthorizer.authorizeByResourceType``): only ACLs whose principal is the caller's or ``User:*``,
  host the caller's or ``*`` and operation ``op`` or All count (no Describe implications). A super user is
  allowed. A LITERAL ``*`` DENY -> denied. Then ``allow.everyone.if.no.acl.found`` -> allowed (even if ACLs
  exist). With no DENY at all -> allowed iff some ALLOW exists. Else allowed iff some ALLOW is not dominated:
  a LITERAL ``*`` ALLOW never is; another LITERAL name is dominated by a LITERAL DENY on the same name or a
  PREFIXED DENY on one of its prefixes; a PREFIXED allow by a PREFIXED DENY on one of its prefixes (itself
  included).
- ``authorized_operations`` (AuthHelper.authorizedOperations; DescribeGroups v3+, Metadata v8+): the bitfield
  ``sum(1 << op)`` of the operations the resource type supports (never All) that ``authorize`` allows.
- Validation (``validate_binding``) returns an ``AclError`` (INVALID_REQUEST 42 and a message) rather than
  raising: an UNKNOWN element, resource type ANY, pattern type ANY/MATCH, operation ANY or permission ANY; a
  CLUSTER resource not named ``kafka-cluster``; an empty name; a name holding ``/``; a principal without
  ``:``; an operation the resource type does not support (plus All, which every type takes). The last check
  is ``kafka-acls.sh``'s (AclCommand), not the broker's: ``check_operation=False`` skips it.
- Filters are Kafka's ``AclBindingFilter.matches``: resource type ANY matches every type; a null name every
  name; pattern type ANY matches LITERAL and PREFIXED with the exact name; MATCH matches the LITERAL name,
  the LITERAL ``*`` of the type and every PREFIXED pattern the name starts with; principal/host null match
  any (else exact string: ``User:*`` only matches ``User:*`` entries); operation and permission ANY match all.
- ``AclIndex`` holds the bindings (a set: an identical binding is never added twice). ``version`` changes on
  every change of its contents (a binding added or removed), and only then (a duplicate add or a removal
  matching nothing leaves it). Decisions look up ``dict``s, never all ACLs: LITERAL patterns by (type, name),
  PREFIXED ones by (type, prefix) probed for each distinct prefix length not longer than the name, then
  entries by principal (the caller's and ``User:*``). ``remove_all(filters)`` gives a binding matched by
  several filters to the first one only (the ZooKeeper authorizer's DeleteAcls).
- Persistence, ZooKeeper's shape: a pattern's node ``/kafka-acl/<Type>/<name>`` (LITERAL) or
  ``/kafka-acl-extended/prefixed/<Type>/<name>`` (PREFIXED), types PascalCase (Topic, Group, Cluster,
  TransactionalId, DelegationToken, User); its data ``{"version":1,"acls":[{"principal":..,
  "permissionType":"Allow","operation":"Read","host":"*"}]}`` (names PascalCase, read case-insensitively
  without underscores, unknown names -> UNKNOWN, as SecurityUtils). Change notifications are sequential
  nodes ``/kafka-acl-changes/acl_changes_<10 digits>`` for LITERAL patterns, data ``TOPIC:orders`` (what
  Kafka 2.0+ writes, the enum name; read in any case, with or without underscores), and
  ``/kafka-acl-extended-changes/acl_changes_<10 digits>`` for PREFIXED ones, data
  ``{"version":1,"resourceType":"TOPIC","name":"orders","patternType":"PREFIXED"}``. Pure encode/decode:
  the runtime does the reading and writing.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from protocol.acl_types import AclOperation, AclPermissionType, PatternType, ResourceType
from protocol.errors import ErrorCode

# Kafka's wire codes, shared with the protocol layer (unknown codes are UNKNOWN, as Kafka's fromCode)
CLUSTER_NAME = "kafka-cluster"
WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"

_Op, _Perm, _Res, _Pat = AclOperation, AclPermissionType, ResourceType, PatternType
_ALL, _DENY, _ALLOW = int(_Op.ALL), int(_Perm.DENY), int(_Perm.ALLOW)
_LITERAL, _PREFIXED = int(_Pat.LITERAL), int(_Pat.PREFIXED)

# AclEntry.supportedOperations (All is accepted in a binding for every type but is not "supported").
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    _Res.TOPIC: (_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER, _Op.DESCRIBE_CONFIGS,
                 _Op.ALTER_CONFIGS),
    _Res.GROUP: (_Op.READ, _Op.DESCRIBE, _Op.DELETE),
    _Res.CLUSTER: (_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS, _Op.IDEMPOTENT_WRITE,
                   _Op.ALTER, _Op.DESCRIBE),
    _Res.TRANSACTIONAL_ID: (_Op.DESCRIBE, _Op.WRITE),
    _Res.DELEGATION_TOKEN: (_Op.DESCRIBE,),
    _Res.USER: (_Op.CREATE_TOKENS, _Op.DESCRIBE_TOKENS),
}

# The ALLOW operations that grant an operation (authorizeAction's allowOps, plus All).
_GRANTED_BY: dict[int, frozenset[int]] = {int(op): frozenset((int(op), _ALL)) for op in AclOperation}
_GRANTED_BY[int(_Op.DESCRIBE)] = frozenset(map(int, (_Op.DESCRIBE, _Op.READ, _Op.WRITE, _Op.DELETE, _Op.ALTER,
                                                     _Op.ALL)))
_GRANTED_BY[int(_Op.DESCRIBE_CONFIGS)] = frozenset(map(int, (_Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS, _Op.ALL)))


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource_type", ResourceType(self.resource_type))
        object.__setattr__(self, "pattern_type", PatternType(self.pattern_type))

    def to_filter(self) -> ResourcePatternFilter:
        return ResourcePatternFilter(self.resource_type, self.name, self.pattern_type)


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "Type:name", e.g. "User:alice"; "User:*" is every user
    host: str  # the client's IP address as text, or "*"
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        object.__setattr__(self, "operation", AclOperation(self.operation))
        object.__setattr__(self, "permission_type", AclPermissionType(self.permission_type))

    def to_filter(self) -> AccessControlEntryFilter:
        return AccessControlEntryFilter(self.principal, self.host, self.operation, self.permission_type)


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def to_filter(self) -> AclBindingFilter:
        return AclBindingFilter(self.pattern.to_filter(), self.entry.to_filter())


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None  # None: any name
    pattern_type: PatternType = PatternType.ANY

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource_type", ResourceType(self.resource_type))
        object.__setattr__(self, "pattern_type", PatternType(self.pattern_type))

    @property
    def is_unknown(self) -> bool:
        return self.resource_type == _Res.UNKNOWN or self.pattern_type == _Pat.UNKNOWN

    def matches(self, pattern: ResourcePattern) -> bool:
        """Kafka's ``ResourcePatternFilter.matches``."""
        if self.resource_type != _Res.ANY and self.resource_type != pattern.resource_type:
            return False
        pt = self.pattern_type
        if pt != _Pat.ANY and pt != _Pat.MATCH and pt != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if pt == _Pat.ANY or pt == pattern.pattern_type:
            return self.name == pattern.name
        if pattern.pattern_type == _Pat.LITERAL:  # pt is MATCH from here on
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type == _Pat.PREFIXED:
            return self.name.startswith(pattern.name)
        return False


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal: str | None = None  # None: any principal
    host: str | None = None  # None: any host
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def __post_init__(self) -> None:
        object.__setattr__(self, "operation", AclOperation(self.operation))
        object.__setattr__(self, "permission_type", AclPermissionType(self.permission_type))

    @property
    def is_unknown(self) -> bool:
        return self.operation == _Op.UNKNOWN or self.permission_type == _Perm.UNKNOWN

    def matches(self, entry: AccessControlEntry) -> bool:
        """Kafka's ``AccessControlEntryFilter.matches``."""
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation != _Op.ANY and self.operation != entry.operation:
            return False
        return self.permission_type == _Perm.ANY or self.permission_type == entry.permission_type


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    @property
    def is_unknown(self) -> bool:
        return self.pattern.is_unknown or self.entry.is_unknown

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


ANY_FILTER = AclBindingFilter()


@dataclass(frozen=True, slots=True)
class AclError:
    """A per-binding or per-filter answer: Kafka's error code and message."""

    code: int
    message: str


def _invalid(message: str) -> AclError:
    return AclError(int(ErrorCode.INVALID_REQUEST), message)


def validate_binding(binding: AclBinding, *, check_operation: bool = True) -> AclError | None:
    """CreateAcls' checks of one binding (CreateAclsRequest, AclApis, AclAuthorizer.validateAclBinding,
    AclControlManager.validateNewAcl): None if it may be created, else INVALID_REQUEST and why."""
    p, e = binding.pattern, binding.entry
    if p.resource_type in (_Res.UNKNOWN, _Res.ANY):
        return _invalid(f"Invalid resourceType {p.resource_type.name}")
    if p.pattern_type not in (_Pat.LITERAL, _Pat.PREFIXED):
        return _invalid(f"Invalid patternType {p.pattern_type.name}")
    if e.operation in (_Op.UNKNOWN, _Op.ANY):
        return _invalid(f"Invalid operation {e.operation.name}")
    if e.permission_type not in (_Perm.ALLOW, _Perm.DENY):
        return _invalid(f"Invalid permissionType {e.permission_type.name}")
    if p.resource_type == _Res.CLUSTER and p.name != CLUSTER_NAME:
        return _invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not p.name:
        return _invalid("Invalid empty resource name")
    if "/" in p.name:
        return _invalid(f"ACL binding contains invalid resource name: {p.name}")
    if ":" not in e.principal:
        return _invalid(f"Could not parse principal from `{e.principal}` (no colon is present separating the "
                        "principal type from the principal name)")
    if check_operation and e.operation != _Op.ALL and e.operation not in SUPPORTED_OPERATIONS[p.resource_type]:
        valid = ",".join(op.name for op in (*SUPPORTED_OPERATIONS[p.resource_type], _Op.ALL))
        return _invalid(f"ResourceType {p.resource_type.name} only supports operations {valid}")
    return None


def validate_filter(binding_filter: AclBindingFilter) -> AclError | None:
    """DescribeAcls/DeleteAcls: a filter with an UNKNOWN element is refused (INVALID_REQUEST)."""
    if binding_filter.pattern.is_unknown:
        return _invalid("Unknown patternFilter.")
    if binding_filter.entry.is_unknown:
        return _invalid("Unknown entryFilter.")
    return None


def parse_principal(text: str) -> tuple[str, str]:
    """``SecurityUtils.parseKafkaPrincipal``: ``Type:name`` split at the first colon -> (type, name)."""
    kind, sep, name = text.partition(":")
    if not text or not sep:
        raise ValueError(f"expected a string in format principalType:principalName but got {text}")
    return kind, name


def _java_trim(text: str) -> str:
    return text.strip("".join(map(chr, range(33))))


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: ``;``-separated principals (``User:admin;User:CN=broker1,OU=kafka``), each trimmed and
    parsed as ``Type:name`` (ValueError otherwise: startup refused). Empty or None: no super user. As Java's
    ``split``, empty items at the end are dropped; an empty item elsewhere is an error."""
    if not value:
        return frozenset()
    items = value.split(";")
    while items and items[-1] == "":
        items.pop()
    out = set()
    for item in items:
        kind, name = parse_principal(_java_trim(item))
        out.add(f"{kind}:{name}")
    return frozenset(out)


# --- the index ---------------------------------------------------------------------------------------------

_Entries = list[tuple[str, int, int]]  # (host, operation, permission) of one principal on one pattern
_Group = dict[str, _Entries]  # principal -> its entries on one pattern
_ResourceKey = tuple[str, str, int, int, int, int]  # principal, host, operation, permission, type, pattern type
_CONCRETE_TYPES = tuple(t for t in ResourceType if t != _Res.ANY)


class AclIndex:
    """The set of ACL bindings, indexed for decisions. Not thread-safe: one owner mutates and decides."""

    __slots__ = ("_by_resource", "_count", "_entries", "_literal", "_prefix_counts", "_prefix_lengths", "_prefixed",
                 "_version")

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self._entries: dict[ResourcePattern, dict[AccessControlEntry, None]] = {}
        self._literal: dict[int, dict[str, _Group]] = {}
        self._prefixed: dict[int, dict[str, _Group]] = {}
        self._prefix_lengths: dict[int, list[int]] = {}  # resource type -> sorted distinct prefix lengths
        self._prefix_counts: dict[int, dict[int, int]] = {}  # resource type -> prefix length -> prefixes
        self._by_resource: dict[_ResourceKey, set[str]] = {}  # authorizeByResourceType's resourceCache
        self._count = 0
        self._version = 0
        for binding in bindings:
            self.add(binding)

    @property
    def version(self) -> int:
        """Changes on every change of the contents (a decision cache keyed on it stays right)."""
        return self._version

    def __len__(self) -> int:
        return self._count

    def __contains__(self, binding: object) -> bool:
        if not isinstance(binding, AclBinding):
            return False
        entries = self._entries.get(binding.pattern)
        return entries is not None and binding.entry in entries

    def add(self, binding: AclBinding) -> bool:
        """Adds one binding; False (and no version change) if it is already there. ValueError for a binding
        Kafka could not even construct (resource type ANY, pattern type other than LITERAL/PREFIXED,
        operation or permission ANY): validate with ``validate_binding`` first."""
        p, e = binding.pattern, binding.entry
        if p.resource_type == _Res.ANY or p.pattern_type not in (_Pat.LITERAL, _Pat.PREFIXED):
            raise ValueError(f"not a concrete resource pattern: {p}")
        if e.operation == _Op.ANY or e.permission_type == _Perm.ANY:
            raise ValueError(f"not a concrete entry: {e}")
        entries = self._entries.get(p)
        if entries is None:
            entries = self._entries[p] = {}
        elif e in entries:
            return False
        entries[e] = None
        self._index(p, e)
        self._count += 1
        self._version += 1
        return True

    def remove(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        """Removes every binding the filter matches; returns them."""
        removed = self.acls(binding_filter)
        for binding in removed:
            self._discard(binding)
        return removed

    def remove_all(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """DeleteAcls: one answer per filter, a binding going to the first filter that matches it."""
        return [self.remove(f) for f in filters]

    def replace(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> bool:
        """Sets the pattern's entries to exactly these (a change notification: the stored node was re-read;
        no entries: the node is gone). True if anything changed."""
        new = dict.fromkeys(entries)
        old = self._entries.get(pattern, {})
        changed = False
        for e in [e for e in old if e not in new]:
            self._discard(AclBinding(pattern, e))
            changed = True
        for e in new:
            changed = self.add(AclBinding(pattern, e)) or changed
        return changed

    def acls(self, binding_filter: AclBindingFilter = ANY_FILTER) -> list[AclBinding]:
        """DescribeAcls: the bindings the filter matches (patterns in insertion order, then entries)."""
        out: list[AclBinding] = []
        pf, ef = binding_filter.pattern, binding_filter.entry
        for pattern in self._candidates(pf):
            if pf.matches(pattern):
                out.extend(AclBinding(pattern, e) for e in self._entries[pattern] if ef.matches(e))
        return out

    def entries(self, pattern: ResourcePattern) -> tuple[AccessControlEntry, ...]:
        """The entries of one pattern (what its ZooKeeper node holds)."""
        return tuple(self._entries.get(pattern, ()))

    def patterns(self) -> tuple[ResourcePattern, ...]:
        return tuple(self._entries)

    # internals

    def _candidates(self, pf: ResourcePatternFilter) -> Iterable[ResourcePattern]:
        name, pt = pf.name, pf.pattern_type
        if name is None or pt not in (_Pat.LITERAL, _Pat.PREFIXED, _Pat.ANY, _Pat.MATCH):
            return list(self._entries)
        types = _CONCRETE_TYPES if pf.resource_type == _Res.ANY else (pf.resource_type,)
        wanted: list[ResourcePattern] = []
        for rt in types:
            if pt in (_Pat.LITERAL, _Pat.ANY, _Pat.MATCH):
                wanted.append(ResourcePattern(rt, name, _Pat.LITERAL))
            if pt in (_Pat.PREFIXED, _Pat.ANY):
                wanted.append(ResourcePattern(rt, name, _Pat.PREFIXED))
            if pt == _Pat.MATCH:
                if name != WILDCARD_RESOURCE:
                    wanted.append(ResourcePattern(rt, WILDCARD_RESOURCE, _Pat.LITERAL))
                for length in self._prefix_lengths.get(rt, ()):
                    if length > len(name):
                        break
                    wanted.append(ResourcePattern(rt, name[:length], _Pat.PREFIXED))
        return [p for p in wanted if p in self._entries]

    def _index(self, p: ResourcePattern, e: AccessControlEntry) -> None:
        rt = int(p.resource_type)
        table = (self._literal if p.pattern_type == _Pat.LITERAL else self._prefixed).setdefault(rt, {})
        group = table.get(p.name)
        if group is None:
            group = table[p.name] = {}
            if p.pattern_type == _Pat.PREFIXED:
                counts = self._prefix_counts.setdefault(rt, {})
                size = len(p.name)
                if size not in counts:
                    counts[size] = 0
                    bisect.insort(self._prefix_lengths.setdefault(rt, []), size)
                counts[size] += 1
        group.setdefault(e.principal, []).append((e.host, int(e.operation), int(e.permission_type)))
        key = (e.principal, e.host, int(e.operation), int(e.permission_type), rt, int(p.pattern_type))
        self._by_resource.setdefault(key, set()).add(p.name)

    def _discard(self, binding: AclBinding) -> None:
        p, e = binding.pattern, binding.entry
        entries = self._entries[p]
        del entries[e]
        if not entries:
            del self._entries[p]
        rt = int(p.resource_type)
        table = (self._literal if p.pattern_type == _Pat.LITERAL else self._prefixed)[rt]
        group = table[p.name]
        mine = group[e.principal]
        mine.remove((e.host, int(e.operation), int(e.permission_type)))
        if not mine:
            del group[e.principal]
        if not group:
            del table[p.name]
            if p.pattern_type == _Pat.PREFIXED:
                counts, size = self._prefix_counts[rt], len(p.name)
                counts[size] -= 1
                if not counts[size]:
                    del counts[size]
                    self._prefix_lengths[rt].remove(size)
        key = (e.principal, e.host, int(e.operation), int(e.permission_type), rt, int(p.pattern_type))
        names = self._by_resource[key]
        names.discard(p.name)
        if not names:
            del self._by_resource[key]
        self._count -= 1
        self._version += 1

    def _groups(self, resource_type: int, name: str) -> list[_Group]:
        """The ACLs matching a resource (authorizeAction's matchingAcls), as per-pattern groups."""
        out: list[_Group] = []
        literal = self._literal.get(resource_type)
        if literal:
            group = literal.get(WILDCARD_RESOURCE)
            if group:
                out.append(group)
            if name != WILDCARD_RESOURCE:
                group = literal.get(name)
                if group:
                    out.append(group)
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            size = len(name)
            for length in self._prefix_lengths[resource_type]:
                if length > size:
                    break
                group = prefixed.get(name[:length])
                if group:
                    out.append(group)
        return out


# --- decisions ---------------------------------------------------------------------------------------------

def _decide(groups: list[_Group], principals: tuple[str, ...], host: str, operation: int) -> bool:
    granted_by = _GRANTED_BY.get(operation)
    if granted_by is None:
        granted_by = frozenset((operation, _ALL))
    allowed = False
    for group in groups:
        for principal in principals:
            entries = group.get(principal)
            if entries is None:
                continue
            for acl_host, op, perm in entries:
                if acl_host != host and acl_host != WILDCARD_HOST:
                    continue
                if perm == _DENY:
                    if op in (operation, _ALL):
                        return False
                elif perm == _ALLOW and op in granted_by:
                    allowed = True
    return allowed


def _principals(principal: str) -> tuple[str, ...]:
    return (principal,) if principal == WILDCARD_PRINCIPAL else (principal, WILDCARD_PRINCIPAL)


@dataclass(frozen=True, slots=True)
class Authorizer:
    """Kafka's AclAuthorizer decisions over an ``AclIndex`` (which may change between calls)."""

    index: AclIndex
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    def is_super_user(self, principal: str) -> bool:
        return principal in self.super_users

    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        """May ``principal`` (``Type:name``) from ``host`` (IP text) do ``operation`` on the LITERAL resource
        (``resource_type``, ``name``)? See the module's rules."""
        if principal in self.super_users:
            return True
        groups = self.index._groups(resource_type, name)
        if not groups:
            return self.allow_everyone_if_no_acl_found
        return _decide(groups, _principals(principal), host, operation)

    def authorized_operations(self, principal: str, host: str, resource_type: int, name: str) -> int:
        """The bitfield (bit = operation code) of the type's supported operations ``authorize`` allows."""
        ops = SUPPORTED_OPERATIONS.get(ResourceType(resource_type))
        if ops is None:
            raise ValueError(f"Not a concrete resource type: {resource_type}")
        if principal in self.super_users:
            allowed = list(ops)
        else:
            groups = self.index._groups(resource_type, name)
            if not groups:
                allowed = list(ops) if self.allow_everyone_if_no_acl_found else []
            else:
                principals = _principals(principal)
                allowed = [op for op in ops if _decide(groups, principals, host, int(op))]
        bits = 0
        for op in allowed:
            bits |= 1 << int(op)
        return bits

    def authorize_by_resource_type(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """May the principal do ``operation`` on at least one resource of the type (KIP-679)? See the
        module's rules (AclAuthorizer.authorizeByResourceType). ValueError for ANY/UNKNOWN arguments."""
        if resource_type == _Res.ANY:
            raise ValueError("Must specify a non-filter resource type for authorizeByResourceType")
        if resource_type == _Res.UNKNOWN:
            raise ValueError("Unknown resource type")
        if operation == _Op.ANY:
            raise ValueError("Must specify a non-filter operation type for authorizeByResourceType")
        if operation == _Op.UNKNOWN:
            raise ValueError("Unknown operation type")
        if principal in self.super_users:
            return True
        cache = self.index._by_resource
        rt = int(resource_type)
        keys = [(p, h, o) for p in _principals(principal)
                for h in ((host,) if host == WILDCARD_HOST else (host, WILDCARD_HOST))
                for o in ((_ALL,) if operation == _ALL else (int(operation), _ALL))]

        def matching(permission: int, pattern_type: int) -> list[set[str]]:
            found = (cache.get((p, h, o, permission, rt, pattern_type)) for p, h, o in keys)
            return [names for names in found if names]

        deny_literals = matching(_DENY, _LITERAL)
        if any(WILDCARD_RESOURCE in names for names in deny_literals):
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = matching(_DENY, _PREFIXED)
        allow_prefixes = matching(_ALLOW, _PREFIXED)
        allow_literals = matching(_ALLOW, _LITERAL)
        if not deny_literals and not deny_prefixes:
            return bool(allow_prefixes or allow_literals)

        def dominated(name: str) -> bool:  # hasDominantPrefixedDeny
            return any(name[:n] in names for n in range(len(name) + 1) for names in deny_prefixes)

        if any(not dominated(prefix) for names in allow_prefixes for prefix in names):
            return True
        return any(literal == WILDCARD_RESOURCE
                   or (not any(literal in names for names in deny_literals) and not dominated(literal))
                   for names in allow_literals for literal in names)


# --- persistence (ZooKeeper's shape) -----------------------------------------------------------------------

VERSION = 1
LITERAL_ACL_ROOT = "/kafka-acl"
EXTENDED_ACL_ROOT = "/kafka-acl-extended"
LITERAL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"


def _pascal(name: str) -> str:
    return "".join(part[:1].upper() + part[1:].lower() for part in name.split("_"))


def _by_name(enum: type[IntEnum], text: str) -> IntEnum:
    """SecurityUtils.valueFromMap: the PascalCase name, or any case without underscores; else UNKNOWN."""
    folded = text.upper()
    for member in enum:
        pascal = _pascal(member.name)
        if text == pascal or folded == pascal.upper():
            return member
    return enum(0)


def resource_type_name(resource_type: int) -> str:
    """``Topic``, ``TransactionalId``, ... (SecurityUtils.resourceTypeName)."""
    return _pascal(ResourceType(resource_type).name)


def operation_name(operation: int) -> str:
    """``Read``, ``ClusterAction``, ``IdempotentWrite``, ``All``, ... (SecurityUtils.operationName)."""
    return _pascal(AclOperation(operation).name)


def permission_type_name(permission_type: int) -> str:
    """``Allow`` or ``Deny``."""
    return _pascal(AclPermissionType(permission_type).name)


def parse_resource_type_name(text: str) -> ResourceType:
    return ResourceType(_by_name(ResourceType, text))


def parse_operation_name(text: str) -> AclOperation:
    return AclOperation(_by_name(AclOperation, text))


def parse_permission_type_name(text: str) -> AclPermissionType:
    return AclPermissionType(_by_name(AclPermissionType, text))


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def acl_node_path(pattern: ResourcePattern) -> str:
    """``/kafka-acl/Topic/orders`` (LITERAL) or ``/kafka-acl-extended/prefixed/Topic/orders`` (PREFIXED)."""
    if pattern.pattern_type == _Pat.LITERAL:
        root = LITERAL_ACL_ROOT
    elif pattern.pattern_type == _Pat.PREFIXED:
        root = f"{EXTENDED_ACL_ROOT}/prefixed"
    else:
        raise ValueError(f"no ZooKeeper path for pattern type {pattern.pattern_type.name}")
    return f"{root}/{resource_type_name(pattern.resource_type)}/{pattern.name}"


def parse_acl_node_path(path: str) -> ResourcePattern:
    """The inverse of ``acl_node_path``; ValueError for any other path or an unknown type."""
    for prefix, pattern_type in ((f"{LITERAL_ACL_ROOT}/", _Pat.LITERAL),
                                 (f"{EXTENDED_ACL_ROOT}/prefixed/", _Pat.PREFIXED)):
        if path.startswith(prefix):
            kind, sep, name = path[len(prefix):].partition("/")
            resource_type = parse_resource_type_name(kind)
            if not sep or not name or resource_type in (_Res.UNKNOWN, _Res.ANY):
                break
            return ResourcePattern(resource_type, name, pattern_type)
    raise ValueError(f"not an ACL node path: {path!r}")


def encode_acl_node(entries: Iterable[AccessControlEntry]) -> bytes:
    """A pattern's node data: ``{"version":1,"acls":[{"principal":..,"permissionType":..,"operation":..,
    "host":..}]}`` (AclEntry.toJsonCompatibleMap), compact UTF-8 JSON."""
    return _json({"version": VERSION, "acls": [
        {"principal": e.principal, "permissionType": permission_type_name(e.permission_type),
         "operation": operation_name(e.operation), "host": e.host} for e in entries]})


def decode_acl_node(data: bytes | None) -> tuple[AccessControlEntry, ...]:
    """AclEntry.fromBytes: empty or None -> no entries; version other than 1 -> ValueError; an unknown
    operation or permission name decodes as UNKNOWN (such an entry never matches a request)."""
    if not data:
        return ()
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(doc.get("acls"), list):
        raise ValueError(f"not a version {VERSION} ACL node: {data!r}")
    out = []
    for item in doc["acls"]:
        principal = item["principal"]
        parse_principal(principal)
        out.append(AccessControlEntry(principal, item["host"], parse_operation_name(item["operation"]),
                                      parse_permission_type_name(item["permissionType"])))
    return tuple(dict.fromkeys(out))


def acl_change_prefix(pattern_type: int) -> str:
    """The sequential-node prefix a change of a pattern of that type is created under, e.g.
    ``/kafka-acl-changes/acl_changes_`` (ZooKeeper appends 10 digits)."""
    if pattern_type == _Pat.LITERAL:
        return f"{LITERAL_CHANGES_PATH}/{CHANGE_PREFIX}"
    if pattern_type == _Pat.PREFIXED:
        return f"{EXTENDED_CHANGES_PATH}/{CHANGE_PREFIX}"
    raise ValueError(f"no change store for pattern type {PatternType(pattern_type).name}")


def acl_change_path(pattern_type: int, sequence: int) -> str:
    """``/kafka-acl-changes/acl_changes_0000000042`` (ZooKeeper's ``%010d`` sequence suffix)."""
    return f"{acl_change_prefix(pattern_type)}{sequence:010d}"


def encode_acl_change(pattern: ResourcePattern) -> bytes:
    """A change notification's data: ``TOPIC:orders`` for LITERAL, the extended JSON for PREFIXED."""
    if pattern.pattern_type == _Pat.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    if pattern.pattern_type == _Pat.PREFIXED:
        return _json({"version": VERSION, "resourceType": pattern.resource_type.name, "name": pattern.name,
                      "patternType": pattern.pattern_type.name})
    raise ValueError(f"no change notification for pattern type {pattern.pattern_type.name}")


def _type_from_string(text: str) -> ResourceType:
    """ResourceType.fromString, also accepting PascalCase without underscores (``TransactionalId``)."""
    folded = text.upper()
    for member in ResourceType:
        if folded in (member.name, member.name.replace("_", "")):
            return member
    return ResourceType.UNKNOWN


def decode_acl_change(pattern_type: int, data: bytes) -> ResourcePattern:
    """The pattern a change notification names. ``pattern_type`` says which store the node came from
    (LITERAL: ``/kafka-acl-changes``, PREFIXED: ``/kafka-acl-extended-changes``). ValueError if malformed or
    naming an unknown resource type or a pattern type other than LITERAL/PREFIXED."""
    if pattern_type == _Pat.LITERAL:
        text = data.decode()
        kind, sep, name = text.partition(":")
        if not sep:
            raise ValueError(f"expected a string in format ResourceType:ResourceName but got {text}")
        pattern = ResourcePattern(_type_from_string(kind), name, _Pat.LITERAL)
    elif pattern_type == _Pat.PREFIXED:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise ValueError(f"not a version {VERSION} extended ACL change: {data!r}")
        found = PatternType.__members__.get(str(doc["patternType"]).upper(), PatternType.UNKNOWN)
        pattern = ResourcePattern(_type_from_string(str(doc["resourceType"])), str(doc["name"]), found)
    else:
        raise ValueError(f"no change store for pattern type {PatternType(pattern_type).name}")
    if pattern.resource_type in (_Res.UNKNOWN, _Res.ANY) or pattern.pattern_type not in (_Pat.LITERAL,
                                                                                         _Pat.PREFIXED):
        raise ValueError(f"change notification names no concrete resource pattern: {data!r}")
    return pattern
