"""DescribeConfigs (32): the configs of topics and of this broker, with their sources.

Rules:
- We serve v0-4 (flexible from v4). ``configuration_keys`` null or empty means every key (Kafka).
- v0 answers ``is_default`` per entry; v1+ answer ``config_source`` and, when ``include_synonyms``, the
  synonyms (the topic override, then the server key); v3+ add ``config_type`` and, when
  ``include_documentation``, ``documentation`` (null otherwise).
- ``error_message``: null on success; an error applies to that resource only, with an empty ``configs``.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=32,
    name="DescribeConfigs",
    valid="0-4",
    flexible="4+",
    request=(
        arr("resources", "0+",
            f("resource_type", "int8"),
            f("resource_name", "string"),
            f("configuration_keys", "[]string", nullable="0+")),
        f("include_synonyms", "bool", "1+"),
        f("include_documentation", "bool", "3+"),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        arr("results", "0+",
            f("error_code", "int16"),
            f("error_message", "string", nullable="0+"),
            f("resource_type", "int8"),
            f("resource_name", "string"),
            arr("configs", "0+",
                f("name", "string"),
                f("value", "string", nullable="0+"),
                f("read_only", "bool"),
                f("is_default", "bool", "0"),
                f("config_source", "int8", "1+", default=-1),
                f("is_sensitive", "bool"),
                arr("synonyms", "1+",
                    f("name", "string", "1+"),
                    f("value", "string", "1+", nullable="0+"),
                    f("source", "int8", "1+")),
                f("config_type", "int8", "3+"),
                f("documentation", "string", "3+", nullable="0+"))),
    ),
)
