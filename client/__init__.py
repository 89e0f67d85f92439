"""groupcoord's Python client: a Kafka-shaped synchronous consumer, its group member, and an admin client.

Public API (everything else is internal and may change):
- ``Consumer``, ``ConsumerRebalanceListener`` — ``client.consumer``
- ``AdminClient`` and its result dataclasses — ``client.admin``
- ``TopicPartition``, ``OffsetAndMetadata``
- assignors: ``RangeAssignor``, ``RoundRobinAssignor``, ``StickyAssignor``, ``CooperativeStickyAssignor``
- errors: ``client.errors`` (``KafkaError`` and subclasses)
- security: ``SecurityConfig`` — ``client.security`` (TLS and SASL settings, Kafka client properties files)

The names are loaded on first use (PEP 562 ``__getattr__``): ``import client.consumer_protocol`` (as the
coordinator's core does) or a single admin command does not import the whole client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from client.admin import (
        AdminClient,
        ClusterDescription,
        GroupDescription,
        GroupListing,
        GroupResult,
        MemberDescription,
        NewTopic,
        TopicDescription,
        TopicResult,
    )
    from client.assignors import CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor, StickyAssignor
    from client.cluster import Node
    from client.consumer import Consumer, ConsumerRebalanceListener
    from client.consumer_protocol import TopicPartition
    from client.errors import (
        AuthenticationError,
        BrokerResponseError,
        CommitFailedError,
        FencedInstanceIdError,
        IllegalStateError,
        KafkaConnectionError,
        KafkaError,
        NoOffsetForPartitionError,
        RebalanceInProgressError,
        RequestTimedOutError,
        SaslAuthenticationError,
        SecurityConfigError,
        SslAuthenticationError,
        UnsupportedVersionError,
    )
    from client.fetcher import ConsumerRecord, Fetcher
    from client.member import MemberState
    from client.offsets import OffsetAndMetadata
    from client.producer import Producer, RecordMetadata
    from client.security import SecurityConfig

_EXPORTS = {
    "AdminClient": "client.admin",
    "ClusterDescription": "client.admin",
    "GroupDescription": "client.admin",
    "GroupListing": "client.admin",
    "GroupResult": "client.admin",
    "MemberDescription": "client.admin",
    "NewTopic": "client.admin",
    "TopicDescription": "client.admin",
    "TopicResult": "client.admin",
    "CooperativeStickyAssignor": "client.assignors",
    "RangeAssignor": "client.assignors",
    "RoundRobinAssignor": "client.assignors",
    "StickyAssignor": "client.assignors",
    "Node": "client.cluster",
    "Consumer": "client.consumer",
    "ConsumerRebalanceListener": "client.consumer",
    "TopicPartition": "client.consumer_protocol",
    "AuthenticationError": "client.errors",
    "BrokerResponseError": "client.errors",
    "CommitFailedError": "client.errors",
    "FencedInstanceIdError": "client.errors",
    "IllegalStateError": "client.errors",
    "KafkaConnectionError": "client.errors",
    "KafkaError": "client.errors",
    "NoOffsetForPartitionError": "client.errors",
    "RebalanceInProgressError": "client.errors",
    "RequestTimedOutError": "client.errors",
    "SaslAuthenticationError": "client.errors",
    "SecurityConfigError": "client.errors",
    "SslAuthenticationError": "client.errors",
    "UnsupportedVersionError": "client.errors",
    "ConsumerRecord": "client.fetcher",
    "Fetcher": "client.fetcher",
    "MemberState": "client.member",
    "OffsetAndMetadata": "client.offsets",
    "Producer": "client.producer",
    "RecordMetadata": "client.producer",
    "SecurityConfig": "client.security",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AdminClient",
    "AuthenticationError",
    "BrokerResponseError",
    "ClusterDescription",
    "CommitFailedError",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "CooperativeStickyAssignor",
    "FencedInstanceIdError",
    "Fetcher",
    "GroupDescription",
    "GroupListing",
    "GroupResult",
    "IllegalStateError",
    "KafkaConnectionError",
    "KafkaError",
    "MemberDescription",
    "MemberState",
    "NewTopic",
    "NoOffsetForPartitionError",
    "Node",
    "OffsetAndMetadata",
    "Producer",
    "RangeAssignor",
    "RebalanceInProgressError",
    "RecordMetadata",
    "RequestTimedOutError",
    "RoundRobinAssignor",
    "SaslAuthenticationError",
    "SecurityConfig",
    "SecurityConfigError",
    "SslAuthenticationError",
    "StickyAssignor",
    "TopicDescription",
    "TopicPartition",
    "TopicResult",
    "UnsupportedVersionError",
]
