"""Schemas of Kafka's SASL authentication, field for field as in Kafka's message JSON
(``SaslHandshakeRequest.json``, ``SaslAuthenticateRequest.json``).

| message          | versions | flexible | notes                                                  |
| ---------------- | -------- | -------- | ------------------------------------------------------ |
| SaslHandshake    | 0-1      | none     | api key 17: the mechanism (v1: then SaslAuthenticate) |
| SaslAuthenticate | 0-2      | 2+       | api key 36: one SASL token each way                    |

A listener with SASL (``SASL_PLAINTEXT://``) answers only ApiVersions, SaslHandshake and
SaslAuthenticate until a connection has authenticated (``net.sasl_server``).
"""

from __future__ import annotations

from kraft_spark.protocol.fields import Field
from kraft_spark.protocol.schema import MessageSchema

F = Field

# fmt: off

SASL_HANDSHAKE_REQUEST = MessageSchema(
    "SaslHandshakeRequest",
    api_key=17,
    valid_versions="0-1",
    flexible_versions="none",
    fields=(
        F("Mechanism", "string", "0+"),
    ),
)

SASL_HANDSHAKE_RESPONSE = MessageSchema(
    "SaslHandshakeResponse",
    api_key=17,
    valid_versions="0-1",
    flexible_versions="none",
    fields=(
        F("ErrorCode", "int16", "0+"),
        F("Mechanisms", "[]string", "0+"),
    ),
)

SASL_AUTHENTICATE_REQUEST = MessageSchema(
    "SaslAuthenticateRequest",
    api_key=36,
    valid_versions="0-2",
    flexible_versions="2+",
    fields=(
        F("AuthBytes", "bytes", "0+"),
    ),
)

SASL_AUTHENTICATE_RESPONSE = MessageSchema(
    "SaslAuthenticateResponse",
    api_key=36,
    valid_versions="0-2",
    flexible_versions="2+",
    fields=(
        F("ErrorCode", "int16", "0+"),
        F("ErrorMessage", "string", "0+", nullable_versions="0+", default=None),
        F("AuthBytes", "bytes", "0+"),
        F("SessionLifetimeMs", "int64", "1+", default=0),
    ),
)
