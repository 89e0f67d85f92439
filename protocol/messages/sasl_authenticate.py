"""SaslAuthenticate (36, KIP-152): one SASL token each way, after a SaslHandshake v1.

Rules:
- We serve v0-2 (flexible from v2). ``auth_bytes`` is the mechanism's token (client-first, challenge,
  server-final, ...); an empty token is b"", never null.
- On success ``error_code`` is 0 and ``error_message`` null. A failed authentication answers
  SASL_AUTHENTICATION_FAILED (58) with a message, then Kafka closes the connection. A SaslAuthenticate
  before a SaslHandshake v1 is an illegal SASL state (Kafka closes the connection); after authentication it
  answers ILLEGAL_SASL_STATE (34).
- ``session_lifetime_ms`` (v1+, KIP-368) is 0 until authentication completes; in the last response it is
  the session's remaining lifetime when re-authentication is enabled (``connections.max.reauth.ms``),
  and 0 when it is not.
"""

from protocol.schema import ApiSchema, f

SCHEMA = ApiSchema(
    key=36,
    name="SaslAuthenticate",
    valid="0-2",
    flexible="2+",
    request=(
        f("auth_bytes", "bytes"),
    ),
    response=(
        f("error_code", "int16"),
        f("error_message", "string", nullable="0+"),
        f("auth_bytes", "bytes"),
        f("session_lifetime_ms", "int64", "1+"),
    ),
)
