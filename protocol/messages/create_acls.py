"""CreateAcls (30, KIP-140): add ACL bindings.

Rules:
- We serve v0-3 (flexible from v2). Codes are `protocol.acl_types`'s. ``resource_pattern_type`` is v1+
  (default LITERAL, 3): every v0 creation is LITERAL.
- ``results`` has one entry per creation, in request order; ``error_message`` is null on success.
- A binding must be concrete: an ANY, MATCH or UNKNOWN code is INVALID_REQUEST (42) for that creation, and
  so are an empty resource name and a CLUSTER resource not named ``kafka-cluster``. Without an authorizer
  every creation answers SECURITY_DISABLED (54); without ALTER on the cluster, CLUSTER_AUTHORIZATION_FAILED
  (31).
- Creating a binding that already exists succeeds (no error, no duplicate).
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=30,
    name="CreateAcls",
    valid="0-3",
    flexible="2+",
    request=(
        arr("creations", "0+",
            f("resource_type", "int8"),
            f("resource_name", "string"),
            f("resource_pattern_type", "int8", "1+", default=3),
            f("principal", "string"),
            f("host", "string"),
            f("operation", "int8"),
            f("permission_type", "int8")),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        arr("results", "0+",
            f("error_code", "int16"),
            f("error_message", "string", nullable="0+")),
    ),
)
