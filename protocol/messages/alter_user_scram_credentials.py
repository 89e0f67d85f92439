"""AlterUserScramCredentials (51, KIP-554): delete and upsert users' SCRAM credentials.

Rules:
- We serve v0, the only version (flexible). ``mechanism`` is `protocol.acl_types.ScramMechanismCode`
  (1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512, 0 unknown).
- An upsertion carries the client-computed ``salted_password`` (SCRAM's Hi(password, salt, iterations))
  and its ``salt``; the server derives and keeps StoredKey and ServerKey, never the password.
- ``results`` has one entry per distinct user named in the request; a user's alterations apply together
  or not at all. Per-user errors: UNSUPPORTED_SASL_MECHANISM (33) for an unknown mechanism,
  UNACCEPTABLE_CREDENTIAL (93) for an empty user name or iterations outside 4096-16384,
  DUPLICATE_RESOURCE (92) for a (user, mechanism) altered twice, RESOURCE_NOT_FOUND (91) for deleting a
  credential that does not exist, CLUSTER_AUTHORIZATION_FAILED (31) without ALTER on the cluster.
  ``error_message`` is null on success.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=51,
    name="AlterUserScramCredentials",
    valid="0",
    flexible="0+",
    request=(
        arr("deletions", "0+",
            f("name", "string"),
            f("mechanism", "int8")),
        arr("upsertions", "0+",
            f("name", "string"),
            f("mechanism", "int8"),
            f("iterations", "int32"),
            f("salt", "bytes"),
            f("salted_password", "bytes")),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        arr("results", "0+",
            f("user", "string"),
            f("error_code", "int16"),
            f("error_message", "string", nullable="0+")),
    ),
)
