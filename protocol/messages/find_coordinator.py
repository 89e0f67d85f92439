"""FindCoordinator (10): which node coordinates a group (key_type 0) or transaction (key_type 1).

Rules:
- We serve v0-6 (flexible from v3). v0-3 ask for one ``key`` and answer one node at top level; v4+ ask for
  ``coordinator_keys[]`` and answer ``coordinators[]``, each with its own error.
- ``error_message`` (v1-3): "NONE" on success, as Kafka's ``Errors.NONE.message()``; the error's message
  otherwise. Per key (v4+) Kafka leaves it null on success; ours likewise.
- key_type 1 (transaction) names the transaction coordinator (this node, or in cluster mode the leader of
  the id's ``__transaction_state`` partition); other key types answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  with a message (a retriable error would make clients retry forever).
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=10,
    name="FindCoordinator",
    valid="0-6",
    flexible="3+",
    request=(
        f("key", "string", "0-3"),
        f("key_type", "int8", "1+"),
        f("coordinator_keys", "[]string", "4+"),
    ),
    response=(
        f("throttle_time_ms", "int32", "1+"),
        f("error_code", "int16", "0-3"),
        f("error_message", "string", "1-3", nullable="1-3"),
        f("node_id", "int32", "0-3"),
        f("host", "string", "0-3"),
        f("port", "int32", "0-3"),
        arr("coordinators", "4+",
            f("key", "string", "4+"),
            f("node_id", "int32", "4+"),
            f("host", "string", "4+"),
            f("port", "int32", "4+"),
            f("error_code", "int16", "4+"),
            f("error_message", "string", "4+", nullable="4+")),
    ),
)
