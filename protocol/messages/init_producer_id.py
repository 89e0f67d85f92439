"""InitProducerId (22): an (idempotent or transactional) producer obtains its producer id and epoch.

Rules: we serve v0-5 (flexible from v2). A null ``transactional_id`` is an idempotent producer; a transactional
id goes to the transaction coordinator, which never answers TRANSACTION_ABORTABLE (v5 only admits it; TV2 is
not served). ``producer_id`` and ``producer_epoch`` in the request (v3+, default -1) let a producer bump its
epoch. The v6 two-phase-commit fields lie outside our range and are not declared.
"""

from protocol.schema import ApiSchema, f

SCHEMA = ApiSchema(
    key=22,
    name="InitProducerId",
    valid="0-5",
    flexible="2+",
    request=(
        f("transactional_id", "string", nullable="0+"),
        f("transaction_timeout_ms", "int32"),
        f("producer_id", "int64", "3+", default=-1),
        f("producer_epoch", "int16", "3+", default=-1),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        f("error_code", "int16"),
        f("producer_id", "int64", default=-1),
        f("producer_epoch", "int16"),
    ),
)
