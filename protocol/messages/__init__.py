"""Every API we serve, one module per API key, each exporting ``SCHEMA``.

Rule: ``ALL`` maps api key -> ApiSchema; a module is listed here exactly once, in api-key order.
"""

from protocol.messages import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_topics,
    describe_acls,
    describe_configs,
    describe_groups,
    describe_producers,
    describe_transactions,
    describe_user_scram_credentials,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)
from protocol.schema import ApiSchema

_MODULES = (
    produce, fetch, list_offsets, metadata, offset_commit, offset_fetch, find_coordinator, join_group,
    heartbeat, leave_group, sync_group, describe_groups, list_groups, sasl_handshake, api_versions,
    create_topics, delete_topics, init_producer_id, offset_for_leader_epoch, add_partitions_to_txn,
    add_offsets_to_txn, end_txn, write_txn_markers, txn_offset_commit, describe_acls, create_acls,
    delete_acls, describe_configs, alter_configs, sasl_authenticate, create_partitions, delete_groups,
    incremental_alter_configs, offset_delete, describe_user_scram_credentials, alter_user_scram_credentials,
    describe_producers, describe_transactions, list_transactions, consumer_group_heartbeat,
    consumer_group_describe,
)

ALL: dict[int, ApiSchema] = {m.SCHEMA.key: m.SCHEMA for m in _MODULES}
assert len(ALL) == len(_MODULES), "two modules declare the same api key"
