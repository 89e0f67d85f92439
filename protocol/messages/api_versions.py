"""ApiVersions (18): the client learns which versions of each API we serve.

Rules:
- We serve v0-4 (flexible from v3). The response header is always v0 (the lead's header code owns that);
  a request newer than v4 is answered with error 35 and a v0 body.
- v3+ responses end with tagged fields: ``supported_features`` (0), ``finalized_features_epoch`` (1,
  default -1), ``finalized_features`` (2), ``zk_migration_ready`` (3).
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=18,
    name="ApiVersions",
    valid="0-4",
    flexible="3+",
    request=(
        f("client_software_name", "string", "3+"),
        f("client_software_version", "string", "3+"),
    ),
    response=(
        f("error_code", "int16"),
        arr("api_keys", "0+",
            f("api_key", "int16"),
            f("min_version", "int16"),
            f("max_version", "int16")),
        f("throttle_time_ms", "int32", "1+"),
        arr("supported_features", "3+",
            f("name", "string", "3+"),
            f("min_version", "int16", "3+"),
            f("max_version", "int16", "3+"),
            tag=0, tagged="3+"),
        f("finalized_features_epoch", "int64", "3+", tag=1, tagged="3+", default=-1),
        arr("finalized_features", "3+",
            f("name", "string", "3+"),
            f("max_version_level", "int16", "3+"),
            f("min_version_level", "int16", "3+"),
            tag=2, tagged="3+"),
        f("zk_migration_ready", "bool", "3+", tag=3, tagged="3+"),
    ),
)
