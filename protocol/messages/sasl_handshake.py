"""SaslHandshake (17): the client names the SASL mechanism it will use on this connection.

Rules:
- We serve v0-1 (never flexible). During authentication the response always lists the mechanisms enabled
  on the listener, on success and on UNSUPPORTED_SASL_MECHANISM (33) alike, so a client can pick again;
  Kafka closes the connection after that error.
- A handshake that is not part of authentication (on an authenticated connection that is not
  re-authenticating, KIP-368, or on a listener without SASL) answers ILLEGAL_SASL_STATE (34) with an empty
  ``mechanisms`` (Kafka's KafkaApis).
- v0: the SASL tokens that follow travel as raw frames (a 4-byte big-endian length, then the token) with
  no request or response header, in both directions. v1: each token is wrapped in a SaslAuthenticate
  request (36) and answered by a SaslAuthenticate response.
- Before authentication completes only ApiVersions and this handshake (then the tokens) are accepted.
"""

from protocol.schema import ApiSchema, f

SCHEMA = ApiSchema(
    key=17,
    name="SaslHandshake",
    valid="0-1",
    flexible="none",
    request=(
        f("mechanism", "string"),
    ),
    response=(
        f("error_code", "int16"),
        f("mechanisms", "[]string"),
    ),
)
