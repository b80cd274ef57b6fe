"""Schemas of kraft-spark's own APIs for the store (not Kafka's), in Kafka's message format.

| message        | versions | flexible | notes                                                 |
| -------------- | -------- | -------- | ----------------------------------------------------- |
| ReadIndex      | 0        | 0+       | api key 10000: the read index of a linearizable read  |
| LeaseCountdown | 0        | 0+       | api key 10001: a keep-alive or TimeToLive of a lease  |

The key is far above Kafka's (which end below 100), so no Kafka release can collide with it;
a Kafka broker or tool that meets it answers as for any unknown API.
"""

from __future__ import annotations

from kraft_spark.protocol.fields import Field
from kraft_spark.protocol.schema import MessageSchema

F = Field

# fmt: off

READ_INDEX_REQUEST = MessageSchema(
    "ReadIndexRequest",
    api_key=10000,
    valid_versions="0",
    flexible_versions="0+",
    fields=(
        F("ClusterId", "string", "0+", nullable_versions="0+", default=None),
        F("TimeoutMs", "int32", "0+", default=5000),
    ),
)

READ_INDEX_RESPONSE = MessageSchema(
    "ReadIndexResponse",
    api_key=10000,
    valid_versions="0",
    flexible_versions="0+",
    fields=(
        F("ErrorCode", "int16", "0+"),
        F("LeaderId", "int32", "0+", default=-1),
        F("LeaderEpoch", "int32", "0+", default=-1),
        F("ReadOffset", "int64", "0+", default=-1),
    ),
)

LEASE_COUNTDOWN_REQUEST = MessageSchema(
    "LeaseCountdownRequest",
    api_key=10001,
    valid_versions="0",
    flexible_versions="0+",
    fields=(
        F("LeaseId", "int64", "0+"),
        F("Renew", "bool", "0+", default=False),
        F("By", "string", "0+", nullable_versions="0+", default=None),
        F("TimeoutMs", "int32", "0+", default=5000),
    ),
)

LEASE_COUNTDOWN_RESPONSE = MessageSchema(
    "LeaseCountdownResponse",
    api_key=10001,
    valid_versions="0",
    flexible_versions="0+",
    fields=(
        F("ErrorCode", "int16", "0+"),
        F("ErrorMessage", "string", "0+", nullable_versions="0+", default=None),
        F("LeaderId", "int32", "0+", default=-1),
        F("TtlMs", "int64", "0+", default=0),
        F("RemainingMs", "int64", "0+", default=0),
    ),
)
