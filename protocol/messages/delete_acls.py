"""DeleteAcls (31, KIP-140): remove every ACL binding that matches each filter.

Rules:
- We serve v0-3 (flexible from v2). Filters read as DescribeAcls's: codes from `protocol.acl_types`, null
  name/principal/host and ANY codes match any; ``pattern_type_filter`` is v1+ (default LITERAL, 3), so a
  v0 filter deletes LITERAL bindings only and a v0 response carries only LITERAL ones.
- ``filter_results`` has one entry per filter, in request order, each listing the bindings it deleted in
  ``matching_acls`` (each with its own error code). A filter that matches nothing succeeds with an empty
  list. ``error_message`` is null on success.
- A filter-level error leaves ``matching_acls`` empty: SECURITY_DISABLED (54) without an authorizer,
  CLUSTER_AUTHORIZATION_FAILED (31) without ALTER on the cluster (every filter carries the error).
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=31,
    name="DeleteAcls",
    valid="0-3",
    flexible="2+",
    request=(
        arr("filters", "0+",
            f("resource_type_filter", "int8"),
            f("resource_name_filter", "string", nullable="0+"),
            f("pattern_type_filter", "int8", "1+", default=3),
            f("principal_filter", "string", nullable="0+"),
            f("host_filter", "string", nullable="0+"),
            f("operation", "int8"),
            f("permission_type", "int8")),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        arr("filter_results", "0+",
            f("error_code", "int16"),
            f("error_message", "string", nullable="0+"),
            arr("matching_acls", "0+",
                f("error_code", "int16"),
                f("error_message", "string", nullable="0+"),
                f("resource_type", "int8"),
                f("resource_name", "string"),
                f("pattern_type", "int8", "1+", default=3),
                f("principal", "string"),
                f("host", "string"),
                f("operation", "int8"),
                f("permission_type", "int8"))),
    ),
)
