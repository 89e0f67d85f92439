"""The client's exceptions: one base class, transport failures, broker error codes, group fencing.

Rules:
- Every exception the client raises on purpose derives from ``KafkaError``.
- Transport: ``KafkaConnectionError`` (cannot connect, or the connection closed with requests in flight)
  and ``RequestTimedOutError`` (no response within the request timeout). Both are retriable.
- A non-zero Kafka error code in a response becomes ``BrokerResponseError`` (or one of the named subclasses
  below) through ``error_for(code)``; it carries the code, its Kafka name and whether it is retriable.
- Security (``client.security``): ``SecurityConfigError`` (bad settings or a bad properties file; also a
  ``ValueError``) and ``AuthenticationError`` — ``SaslAuthenticationError`` (the node refused our SASL login,
  or could not prove itself to SCRAM) and ``SslAuthenticationError`` (the TLS handshake failed: certificate
  not trusted, wrong host name, no client certificate...). Neither is retriable: a connection never retries
  a refused login, and the callers that retry on errors let these through (no reconnect loop).
- Group fencing is surfaced with Kafka's names: ``CommitFailedError`` (the generation moved on: the member
  was kicked out or the group rebalanced), ``RebalanceInProgressError``, ``FencedInstanceIdError`` (another
  process uses our ``group.instance.id``; fatal), ``NoOffsetForPartitionError`` (reset policy "none").
"""

from __future__ import annotations

from protocol.errors import ErrorCode, error_name, is_retriable


class KafkaError(Exception):
    """Base of everything the client raises on purpose."""

    retriable = False


class KafkaConnectionError(KafkaError):
    """Could not connect to a node, or the connection dropped before the response arrived."""

    retriable = True


class RequestTimedOutError(KafkaError):
    """No response arrived within the request timeout."""

    retriable = True


class SecurityConfigError(KafkaError, ValueError):
    """Security settings that cannot work: an unknown protocol or mechanism, missing credentials, an unreadable
    certificate file, a bad line in a client properties file."""


class AuthenticationError(KafkaError):
    """A node refused to authenticate us, or we refused the node (TLS or SCRAM); never retried."""


class SaslAuthenticationError(AuthenticationError):
    """SASL failed: ``error_code`` is Kafka's code when the node answered one (58 SASL_AUTHENTICATION_FAILED,
    33 UNSUPPORTED_SASL_MECHANISM, 34 ILLEGAL_SASL_STATE), else None (we refused the node's messages)."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed (untrusted certificate, host name mismatch, client certificate refused...)."""


class UnsupportedVersionError(KafkaError):
    """The node and this client share no version of an API we need."""


class IllegalStateError(KafkaError):
    """The call is not valid in the consumer's current state (closed, not subscribed, not assigned...)."""


class BrokerResponseError(KafkaError):
    """A response carried a non-zero Kafka error code."""

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = int(code)
        self.name = error_name(code)
        self.retriable = is_retriable(code)
        super().__init__(f"{self.name} ({self.code})" + (f": {message}" if message else ""))


class CommitFailedError(BrokerResponseError):
    """The commit cannot complete: the group rebalanced and the partitions may belong to someone else."""

    def __init__(self, code: int = int(ErrorCode.ILLEGAL_GENERATION), message: str | None = None) -> None:
        super().__init__(code, message or (
            "commit cannot be completed since the group has already rebalanced and assigned the partitions "
            "to another member; this means poll() was not called within max.poll.interval.ms or the "
            "session timed out"))


class RebalanceInProgressError(BrokerResponseError):
    """The group is rebalancing: poll() to rejoin, then commit again."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(ErrorCode.REBALANCE_IN_PROGRESS, message)


class FencedInstanceIdError(BrokerResponseError):
    """Another member joined with our group.instance.id; this consumer can no longer take part."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(ErrorCode.FENCED_INSTANCE_ID, message)


class NoOffsetForPartitionError(KafkaError):
    """A partition has no committed offset and auto.offset.reset is "none"."""

    def __init__(self, partitions: object) -> None:
        super().__init__(f"no committed offset and no reset policy for {partitions}")
        self.partitions = partitions


def error_for(code: int, message: str | None = None) -> BrokerResponseError:
    """The exception for a Kafka error code (code must be non-zero)."""
    if code == ErrorCode.REBALANCE_IN_PROGRESS:
        return RebalanceInProgressError(message)
    if code == ErrorCode.FENCED_INSTANCE_ID:
        return FencedInstanceIdError(message)
    return BrokerResponseError(code, message)


def check(code: int, message: str | None = None) -> None:
    """Raise ``error_for(code)`` unless the code is NONE."""
    if code:
        raise error_for(code, message)
