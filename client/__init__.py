"""groupcoord's Python client: a Kafka-shaped synchronous consumer, its group member, and an admin client.

Public API (everything else is internal and may change):
- ``Consumer``, ``ConsumerRebalanceListener`` — ``client.consumer``
- ``AdminClient`` and its result dataclasses — ``client.admin``
- ``TopicPartition``, ``OffsetAndMetadata``
- assignors: ``RangeAssignor``, ``RoundRobinAssignor``, ``StickyAssignor``, ``CooperativeStickyAssignor``
- errors: ``client.errors`` (``KafkaError`` and subclasses)
- security: ``SecurityConfig`` — ``client.security`` (TLS and SASL settings, Kafka client properties files)
"""

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
