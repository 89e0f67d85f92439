"""The enumerations carried as int8 codes by the ACL and SCRAM-credential APIs (Kafka's values).

Rules:
- Values are Kafka's wire codes (``org.apache.kafka.common.resource.ResourceType``, ``PatternType``,
  ``org.apache.kafka.common.acl.AclOperation``, ``AclPermissionType``, and the ``ScramMechanism`` of
  ``org.apache.kafka.clients.admin``); never renumber them.
- ``UNKNOWN`` (0) is what a code we do not know maps to (``ResourceType(99)`` is ``UNKNOWN``, as Kafka's
  ``fromCode``); Kafka rejects it in a binding or filter.
- ``ANY`` (and ``PatternType.MATCH``) are valid only in a filter (DescribeAcls, DeleteAcls); CreateAcls
  rejects them (Kafka: INVALID_REQUEST). ``MATCH`` matches a literal name, the ``*`` wildcard and every
  prefixed pattern that is a prefix of the name.
- An ACL whose operation is ``ALL`` covers every operation (ALLOW and DENY alike). An ALLOW ACL for READ,
  WRITE, DELETE or ALTER also allows DESCRIBE, and one for ALTER_CONFIGS allows DESCRIBE_CONFIGS (Kafka's
  authorizer); DENY never implies. A DENY that matches wins over any ALLOW.
- Requests of version 0 (ACL APIs) carry no pattern type: it is LITERAL, and a v0 response can only carry
  LITERAL patterns.
- ``ScramMechanismCode`` is the mechanism byte of Describe/AlterUserScramCredentials: 1 = SCRAM-SHA-256,
  2 = SCRAM-SHA-512, 0 = unknown (Kafka answers UNSUPPORTED_SASL_MECHANISM for it).
- Plain data: nothing here does I/O.
"""

from __future__ import annotations

from enum import IntEnum


class _Coded(IntEnum):
    """Kafka's ``fromCode``: a code we do not know is UNKNOWN (0)."""

    @classmethod
    def _missing_(cls, value: object) -> _Coded | None:
        return cls(0) if isinstance(value, int) else None


class ResourceType(_Coded):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Coded):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Coded):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class ScramMechanismCode(_Coded):
    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL mechanism name ("SCRAM-SHA-256"); "UNKNOWN" for 0."""
        return self.name.replace("_", "-")


CLUSTER_RESOURCE_NAME = "kafka-cluster"  # the one CLUSTER resource's name (Kafka's Resource.CLUSTER_NAME)
WILDCARD_RESOURCE = "*"  # a LITERAL name matching every resource of its type
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
