"""DescribeUserScramCredentials (50, KIP-554): which SCRAM mechanisms (and iteration counts) users have.

Rules:
- We serve v0, the only version (flexible). ``users`` null or empty describes every user with a
  credential; the salts and keys are never returned.
- ``credential_infos`` gives each mechanism as `protocol.acl_types.ScramMechanismCode` (1 = SCRAM-SHA-256,
  2 = SCRAM-SHA-512) with its iteration count.
- Per-user errors: RESOURCE_NOT_FOUND (91) for a named user without credentials, DUPLICATE_RESOURCE (92)
  for a user named twice. The top-level ``error_code`` is for request-wide failures
  (CLUSTER_AUTHORIZATION_FAILED, 31, without DESCRIBE on the cluster). Messages are null on success.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=50,
    name="DescribeUserScramCredentials",
    valid="0",
    flexible="0+",
    request=(
        arr("users", "0+",
            f("name", "string"),
            nullable="0+"),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        f("error_code", "int16"),
        f("error_message", "string", nullable="0+"),
        arr("results", "0+",
            f("user", "string"),
            f("error_code", "int16"),
            f("error_message", "string", nullable="0+"),
            arr("credential_infos", "0+",
                f("mechanism", "int8"),
                f("iterations", "int32"))),
    ),
)
