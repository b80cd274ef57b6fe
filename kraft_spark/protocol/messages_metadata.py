"""Schema of Kafka's Metadata API (key 3), field for field as in Kafka's ``MetadataRequest.json``
and ``MetadataResponse.json``, restricted to the flexible versions we serve.

| message  | versions | flexible | notes                                                       |
| -------- | -------- | -------- | ----------------------------------------------------------- |
| Metadata | 9-13     | 9+       | v10: TopicId; v12: topics by id; v13: top-level ErrorCode    |

Why 9-13: an admin client started with ``--bootstrap-server`` asks Metadata for the cluster's
brokers before anything else, at the highest version both sides know. Kafka 4.4 knows 0-13;
9 (the first flexible version) lets admin clients back to Kafka 2.4 in too, and every version
from there on is only a field or two apart, which the version strings below express. Field
versions are Kafka's own (a field older than 9 keeps its ``"0+"``), so the JSON files can be
compared line by line. The quorum has no topics (see ``kraft_spark.protocol.wire_metadata``), so
the partition part of the response is only ever empty, but it is declared in full: a client
decodes by the schema, not by what we happen to send.
"""

from __future__ import annotations

from kraft_spark.protocol.fields import Field
from kraft_spark.protocol.schema import MessageSchema

F = Field

METADATA_VERSIONS = "9-13"

# fmt: off

METADATA_REQUEST = MessageSchema(
    "MetadataRequest",
    api_key=3,
    valid_versions=METADATA_VERSIONS,
    flexible_versions="9+",
    fields=(
        # Null asks for every topic, an empty array for none (the admin client's node lookup).
        F("Topics", "[]MetadataRequestTopic", "0+", nullable_versions="1+", fields=(
            F("TopicId", "uuid", "10+"),
            F("Name", "string", "0+", nullable_versions="10+"),
        )),
        F("AllowAutoTopicCreation", "bool", "4+", default=True),
        F("IncludeClusterAuthorizedOperations", "bool", "8-10"),
        F("IncludeTopicAuthorizedOperations", "bool", "8+"),
    ),
)

METADATA_RESPONSE = MessageSchema(
    "MetadataResponse",
    api_key=3,
    valid_versions=METADATA_VERSIONS,
    flexible_versions="9+",
    fields=(
        F("ThrottleTimeMs", "int32", "3+"),
        F("Brokers", "[]MetadataResponseBroker", "0+", fields=(
            F("NodeId", "int32", "0+"),
            F("Host", "string", "0+"),
            F("Port", "int32", "0+"),
            F("Rack", "string", "1+", nullable_versions="1+", default=None),
        )),
        F("ClusterId", "string", "2+", nullable_versions="2+", default=None),
        F("ControllerId", "int32", "1+", default=-1),
        F("Topics", "[]MetadataResponseTopic", "0+", fields=(
            F("ErrorCode", "int16", "0+"),
            F("Name", "string", "0+", nullable_versions="12+"),
            F("TopicId", "uuid", "10+"),
            F("IsInternal", "bool", "1+", default=False),
            F("Partitions", "[]MetadataResponsePartition", "0+", fields=(
                F("ErrorCode", "int16", "0+"),
                F("PartitionIndex", "int32", "0+"),
                F("LeaderId", "int32", "0+"),
                F("LeaderEpoch", "int32", "7+", default=-1),
                F("ReplicaNodes", "[]int32", "0+"),
                F("IsrNodes", "[]int32", "0+"),
                F("OfflineReplicas", "[]int32", "5+"),
            )),
            F("TopicAuthorizedOperations", "int32", "8+", default=-2147483648),
        )),
        F("ClusterAuthorizedOperations", "int32", "8-10", default=-2147483648),
        F("ErrorCode", "int16", "13+"),
    ),
)

ALL_METADATA_SCHEMAS: tuple[MessageSchema, ...] = (METADATA_REQUEST, METADATA_RESPONSE)
# fmt: on
