"""DeleteTopics (20): delete topics by name (``topic_names``, v0-5) or by name/id (``topics[]``, v6+).

Rules: we serve v0-6 (flexible from v4; v0 has no throttle time). Result ``name`` is nullable from v6 (deleted by id);
``error_message`` from v5: null on success, the error's message otherwise (Kafka's ``ApiError.message``).
We always echo ``name``, also for a topic deleted by id.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=20,
    name="DeleteTopics",
    valid="0-6",
    flexible="4+",
    request=(
        arr("topics", "6+",
            f("name", "string", "6+", nullable="6+"),
            f("topic_id", "uuid", "6+")),
        f("topic_names", "[]string", "0-5"),
        f("timeout_ms", "int32"),
    ),
    response=(
        f("throttle_time_ms", "int32", "1+"),
        arr("responses", "0+",
            f("name", "string", nullable="6+"),
            f("topic_id", "uuid", "6+"),
            f("error_code", "int16"),
            f("error_message", "string", "5+", nullable="5+")),
    ),
)
