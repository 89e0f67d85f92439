"""DescribeAcls (29, KIP-140): the ACLs that match one filter, grouped by resource pattern.

Rules:
- We serve v0-3 (flexible from v2). Codes are `protocol.acl_types`'s: resource type, pattern type,
  operation and permission type. A null name, principal or host filter matches any; ANY codes match any.
- ``pattern_type_filter`` is v1+ (default LITERAL, 3): a v0 request describes LITERAL patterns only, and a
  v0 response can only carry LITERAL ones. MATCH also finds the wildcard ``*`` and prefixed patterns.
- Errors are request-wide, in the top-level ``error_code`` with an empty ``resources``: SECURITY_DISABLED
  (54) without an authorizer, CLUSTER_AUTHORIZATION_FAILED (31) without DESCRIBE on the cluster.
  ``error_message`` is null on success.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=29,
    name="DescribeAcls",
    valid="0-3",
    flexible="2+",
    request=(
        f("resource_type_filter", "int8"),
        f("resource_name_filter", "string", nullable="0+"),
        f("pattern_type_filter", "int8", "1+", default=3),
        f("principal_filter", "string", nullable="0+"),
        f("host_filter", "string", nullable="0+"),
        f("operation", "int8"),
        f("permission_type", "int8"),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        f("error_code", "int16"),
        f("error_message", "string", nullable="0+"),
        arr("resources", "0+",
            f("resource_type", "int8"),
            f("resource_name", "string"),
            f("pattern_type", "int8", "1+", default=3),
            arr("acls", "0+",
                f("principal", "string"),
                f("host", "string"),
                f("operation", "int8"),
                f("permission_type", "int8"))),
    ),
)
