"""Schemas of the headers and messages we speak, field for field as in Kafka's message JSON.

Transcribed from ``clients/src/main/resources/common/message/*.json`` in apache/kafka, restricted
to the versions we support (a field that exists only in later versions is left out; version
strings of the fields we keep are Kafka's own, so the files can be compared line by line).

| message          | versions | flexible | notes                                              |
| ---------------- | -------- | -------- | -------------------------------------------------- |
| RequestHeader    | 1-2      | 2        | ClientId stays a classic nullable string in v2     |
| ResponseHeader   | 0-1      | 1        |                                                    |
| ApiVersions      | 0-3      | 3        | response always travels with header v0             |
| Produce          | 9        | 9        | CurrentLeader/NodeEndpoints are v10+, so absent    |
| Fetch            | 12       | 12       | topics by name (TopicId is v13+)                   |
| Vote             | 0-2      | 0        | v1: KIP-853 voter keys, endpoints; v2: PreVote     |
| BeginQuorumEpoch | 0-1      | 1        | v1: KIP-853 voter key, leader endpoints            |
| EndQuorumEpoch   | 0-1      | 1        | v1: PreferredCandidates (id + dir) replace v0's    |
| DescribeQuorum   | 0-2      | 0        | v1: KIP-836 timestamps; v2: KIP-853 Nodes, dir ids |
| FetchSnapshot    | 0        | 0        | KIP-630; v1's ReplicaDirectoryId is KIP-853's      |
"""

from __future__ import annotations

from kraft_spark.protocol.fields import Field
from kraft_spark.protocol.primitives import NIL_UUID
from kraft_spark.protocol.schema import MessageSchema

F = Field

# Schema tables keep one line per field, like the JSON files.
# fmt: off

# -- headers -----------------------------------------------------------------------------------

REQUEST_HEADER = MessageSchema(
    "RequestHeader",
    valid_versions="1-2",
    flexible_versions="2+",
    fields=(
        F("RequestApiKey", "int16", "0+"),
        F("RequestApiVersion", "int16", "0+"),
        F("CorrelationId", "int32", "0+"),
        F("ClientId", "string", "1+", nullable_versions="1+", flexible_versions="none"),
    ),
)

RESPONSE_HEADER = MessageSchema(
    "ResponseHeader",
    valid_versions="0-1",
    flexible_versions="1+",
    fields=(F("CorrelationId", "int32", "0+"),),
)

# -- ApiVersions (18) --------------------------------------------------------------------------

API_VERSIONS_REQUEST = MessageSchema(
    "ApiVersionsRequest",
    api_key=18,
    valid_versions="0-3",
    flexible_versions="3+",
    fields=(
        F("ClientSoftwareName", "string", "3+"),
        F("ClientSoftwareVersion", "string", "3+"),
    ),
)

_FEATURE = (
    F("Name", "string", "3+"),
    F("MinVersion", "int16", "3+"),
    F("MaxVersion", "int16", "3+"),
)
_FINALIZED_FEATURE = (
    F("Name", "string", "3+"),
    F("MaxVersionLevel", "int16", "3+"),
    F("MinVersionLevel", "int16", "3+"),
)

API_VERSIONS_RESPONSE = MessageSchema(
    "ApiVersionsResponse",
    api_key=18,
    valid_versions="0-3",
    flexible_versions="3+",
    fields=(
        F("ErrorCode", "int16", "0+"),
        F(
            "ApiKeys",
            "[]ApiVersion",
            "0+",
            fields=(
                F("ApiKey", "int16", "0+"),
                F("MinVersion", "int16", "0+"),
                F("MaxVersion", "int16", "0+"),
            ),
        ),
        F("ThrottleTimeMs", "int32", "1+"),
        F("SupportedFeatures", "[]SupportedFeatureKey", "3+", tag=0, tagged_versions="3+",
          fields=_FEATURE),
        F("FinalizedFeaturesEpoch", "int64", "3+", tag=1, tagged_versions="3+", default=-1),
        F("FinalizedFeatures", "[]FinalizedFeatureKey", "3+", tag=2, tagged_versions="3+",
          fields=_FINALIZED_FEATURE),
        F("ZkMigrationReady", "bool", "3+", tag=3, tagged_versions="3+", default=False),
    ),
)

# -- Produce (0) -------------------------------------------------------------------------------

PRODUCE_REQUEST = MessageSchema(
    "ProduceRequest",
    api_key=0,
    valid_versions="9-10",
    flexible_versions="9+",
    fields=(
        F("TransactionalId", "string", "3+", nullable_versions="3+", default=None),
        F("Acks", "int16", "0+"),
        F("TimeoutMs", "int32", "0+"),
        F("TopicData", "[]TopicProduceData", "0+", fields=(
            F("Name", "string", "0+"),
            F("PartitionData", "[]PartitionProduceData", "0+", fields=(
                F("Index", "int32", "0+"),
                F("Records", "records", "0+", nullable_versions="0+"),
            )),
        )),
    ),
)

PRODUCE_RESPONSE = MessageSchema(
    "ProduceResponse",
    api_key=0,
    valid_versions="9-10",
    flexible_versions="9+",
    fields=(
        F("Responses", "[]TopicProduceResponse", "0+", fields=(
            F("Name", "string", "0+"),
            F("PartitionResponses", "[]PartitionProduceResponse", "0+", fields=(
                F("Index", "int32", "0+"),
                F("ErrorCode", "int16", "0+"),
                F("BaseOffset", "int64", "0+"),
                F("LogAppendTimeMs", "int64", "2+", default=-1),
                F("LogStartOffset", "int64", "5+", default=-1),
                F("RecordErrors", "[]BatchIndexAndErrorMessage", "8+", fields=(
                    F("BatchIndex", "int32", "8+"),
                    F("BatchIndexErrorMessage", "string", "8+", nullable_versions="8+",
                      default=None),
                )),
                F("ErrorMessage", "string", "8+", nullable_versions="8+", default=None),
                # KIP-951: the leader a client should turn to (and, on success, the epoch that
                # appended the batch).
                F("CurrentLeader", "LeaderIdAndEpoch", "10+", tag=0, tagged_versions="10+",
                  fields=(
                      F("LeaderId", "int32", "10+", default=-1),
                      F("LeaderEpoch", "int32", "10+", default=-1),
                  )),
            )),
        )),
        F("ThrottleTimeMs", "int32", "1+", default=0),
        F("NodeEndpoints", "[]NodeEndpoint", "10+", tag=0, tagged_versions="10+", fields=(
            F("NodeId", "int32", "10+"),
            F("Host", "string", "10+"),
            F("Port", "int32", "10+"),
            F("Rack", "string", "10+", nullable_versions="10+", default=None),
        )),
    ),
)

# -- Fetch (1) ---------------------------------------------------------------------------------

FETCH_REQUEST = MessageSchema(
    "FetchRequest",
    api_key=1,
    valid_versions="12",
    flexible_versions="12+",
    fields=(
        F("ClusterId", "string", "12+", nullable_versions="12+", default=None, tag=0,
          tagged_versions="12+"),
        F("ReplicaId", "int32", "0-14", default=-1),
        F("MaxWaitMs", "int32", "0+"),
        F("MinBytes", "int32", "0+"),
        F("MaxBytes", "int32", "3+", default=0x7FFFFFFF),
        F("IsolationLevel", "int8", "4+", default=0),
        F("SessionId", "int32", "7+", default=0),
        F("SessionEpoch", "int32", "7+", default=-1),
        F("Topics", "[]FetchTopic", "0+", fields=(
            F("Topic", "string", "0-12"),
            F("Partitions", "[]FetchPartition", "0+", fields=(
                F("Partition", "int32", "0+"),
                F("CurrentLeaderEpoch", "int32", "9+", default=-1),
                F("FetchOffset", "int64", "0+"),
                F("LastFetchedEpoch", "int32", "12+", default=-1),
                F("LogStartOffset", "int64", "5+", default=-1),
                F("PartitionMaxBytes", "int32", "0+"),
            )),
        )),
        F("ForgottenTopicsData", "[]ForgottenTopic", "7+", fields=(
            F("Topic", "string", "7-12"),
            F("Partitions", "[]int32", "7+"),
        )),
        F("RackId", "string", "11+", default=""),
        # kraft-spark's own tagged field (Kafka skips unknown tags): a voter that lost its disk
        # and is catching up as an observer (docs/concepts/protocol.md), like KIP-853's
        # ReplicaDirectoryId.
        F("KraftSparkReplicaDirectoryId", "uuid", "12+", tag=10001, tagged_versions="12+",
          default=NIL_UUID),
        F("KraftSparkCatchingUp", "bool", "12+", tag=10000, tagged_versions="12+",
          default=False),
    ),
)

FETCH_RESPONSE = MessageSchema(
    "FetchResponse",
    api_key=1,
    valid_versions="12",
    flexible_versions="12+",
    fields=(
        F("ThrottleTimeMs", "int32", "1+"),
        F("ErrorCode", "int16", "7+"),
        F("SessionId", "int32", "7+", default=0),
        F("Responses", "[]FetchableTopicResponse", "0+", fields=(
            F("Topic", "string", "0-12"),
            F("Partitions", "[]PartitionData", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("ErrorCode", "int16", "0+"),
                F("HighWatermark", "int64", "0+"),
                F("LastStableOffset", "int64", "4+", default=-1),
                F("LogStartOffset", "int64", "5+", default=-1),
                F("DivergingEpoch", "EpochEndOffset", "12+", tag=0, tagged_versions="12+",
                  fields=(
                      F("Epoch", "int32", "12+", default=-1),
                      F("EndOffset", "int64", "12+", default=-1),
                  )),
                F("CurrentLeader", "LeaderIdAndEpoch", "12+", tag=1, tagged_versions="12+",
                  fields=(
                      F("LeaderId", "int32", "12+", default=-1),
                      F("LeaderEpoch", "int32", "12+", default=-1),
                  )),
                F("SnapshotId", "SnapshotId", "12+", tag=2, tagged_versions="12+", fields=(
                    F("EndOffset", "int64", "0+", default=-1),
                    F("Epoch", "int32", "0+", default=-1),
                )),
                F("AbortedTransactions", "[]AbortedTransaction", "4+", nullable_versions="4+",
                  fields=(
                      F("ProducerId", "int64", "4+"),
                      F("FirstOffset", "int64", "4+"),
                  )),
                F("PreferredReadReplica", "int32", "11+", default=-1),
                F("Records", "records", "0+", nullable_versions="0+"),
            )),
        )),
    ),
)

# -- Vote (52) ---------------------------------------------------------------------------------

VOTE_REQUEST = MessageSchema(
    "VoteRequest",
    api_key=52,
    valid_versions="0-2",
    flexible_versions="0+",
    fields=(
        F("ClusterId", "string", "0+", nullable_versions="0+", default=None),
        F("VoterId", "int32", "1+", default=-1),  # KIP-853: the voter receiving the request
        F("Topics", "[]TopicData", "0+", fields=(
            F("TopicName", "string", "0+"),
            F("Partitions", "[]PartitionData", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("CandidateEpoch", "int32", "0+"),
                F("CandidateId", "int32", "0+"),
                F("CandidateDirectoryId", "uuid", "1+"),
                F("VoterDirectoryId", "uuid", "1+"),
                F("LastOffsetEpoch", "int32", "0+"),
                F("LastOffset", "int64", "0+"),
                F("PreVote", "bool", "2+"),  # KIP-996
            )),
        )),
    ),
)

# KIP-853's v1 responses name where the leader they report listens (tag 0).
_NODE_ENDPOINTS = F("NodeEndpoints", "[]NodeEndpoint", "1+", tag=0, tagged_versions="1+", fields=(
    F("NodeId", "int32", "1+"),
    F("Host", "string", "1+"),
    F("Port", "uint16", "1+"),
))
_LEADER_ENDPOINTS = F("LeaderEndpoints", "[]LeaderEndpoint", "1+", fields=(
    F("Name", "string", "1+"),
    F("Host", "string", "1+"),
    F("Port", "uint16", "1+"),
))

VOTE_RESPONSE = MessageSchema(
    "VoteResponse",
    api_key=52,
    valid_versions="0-2",
    flexible_versions="0+",
    fields=(
        F("ErrorCode", "int16", "0+"),
        F("Topics", "[]TopicData", "0+", fields=(
            F("TopicName", "string", "0+"),
            F("Partitions", "[]PartitionData", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("ErrorCode", "int16", "0+"),
                F("LeaderId", "int32", "0+"),
                F("LeaderEpoch", "int32", "0+"),
                F("VoteGranted", "bool", "0+"),
            )),
        )),
        _NODE_ENDPOINTS,
    ),
)

# -- BeginQuorumEpoch (53) ---------------------------------------------------------------------

BEGIN_QUORUM_EPOCH_REQUEST = MessageSchema(
    "BeginQuorumEpochRequest",
    api_key=53,
    valid_versions="0-1",
    flexible_versions="1+",
    fields=(
        F("ClusterId", "string", "0+", nullable_versions="0+", default=None),
        F("VoterId", "int32", "1+", default=-1),
        F("Topics", "[]TopicData", "0+", fields=(
            F("TopicName", "string", "0+"),
            F("Partitions", "[]PartitionData", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("VoterDirectoryId", "uuid", "1+"),
                F("LeaderId", "int32", "0+"),
                F("LeaderEpoch", "int32", "0+"),
            )),
        )),
        _LEADER_ENDPOINTS,
    ),
)

_LEADER_PARTITION_RESPONSE = (
    F("PartitionIndex", "int32", "0+"),
    F("ErrorCode", "int16", "0+"),
    F("LeaderId", "int32", "0+"),
    F("LeaderEpoch", "int32", "0+"),
)

BEGIN_QUORUM_EPOCH_RESPONSE = MessageSchema(
    "BeginQuorumEpochResponse",
    api_key=53,
    valid_versions="0-1",
    flexible_versions="1+",
    fields=(
        F("ErrorCode", "int16", "0+"),
        F("Topics", "[]TopicData", "0+", fields=(
            F("TopicName", "string", "0+"),
            F("Partitions", "[]PartitionData", "0+", fields=_LEADER_PARTITION_RESPONSE),
        )),
        _NODE_ENDPOINTS,
    ),
)

# -- EndQuorumEpoch (54) -----------------------------------------------------------------------

END_QUORUM_EPOCH_REQUEST = MessageSchema(
    "EndQuorumEpochRequest",
    api_key=54,
    valid_versions="0-1",
    flexible_versions="1+",
    fields=(
        F("ClusterId", "string", "0+", nullable_versions="0+", default=None),
        F("Topics", "[]TopicData", "0+", fields=(
            F("TopicName", "string", "0+"),
            F("Partitions", "[]PartitionData", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("LeaderId", "int32", "0+"),
                F("LeaderEpoch", "int32", "0+"),
                F("PreferredSuccessors", "[]int32", "0"),
                F("PreferredCandidates", "[]ReplicaInfo", "1+", fields=(
                    F("CandidateId", "int32", "1+"),
                    F("CandidateDirectoryId", "uuid", "1+"),
                )),
            )),
        )),
        _LEADER_ENDPOINTS,
    ),
)

END_QUORUM_EPOCH_RESPONSE = MessageSchema(
    "EndQuorumEpochResponse",
    api_key=54,
    valid_versions="0-1",
    flexible_versions="1+",
    fields=(
        F("ErrorCode", "int16", "0+"),
        F("Topics", "[]TopicData", "0+", fields=(
            F("TopicName", "string", "0+"),
            F("Partitions", "[]PartitionData", "0+", fields=_LEADER_PARTITION_RESPONSE),
        )),
        _NODE_ENDPOINTS,
    ),
)

# -- DescribeQuorum (55) -----------------------------------------------------------------------

DESCRIBE_QUORUM_REQUEST = MessageSchema(
    "DescribeQuorumRequest",
    api_key=55,
    valid_versions="0-2",
    flexible_versions="0+",
    fields=(
        F("Topics", "[]TopicData", "0+", fields=(
            F("TopicName", "string", "0+"),
            F("Partitions", "[]PartitionData", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
            )),
        )),
    ),
)

_REPLICA_STATE = (
    F("ReplicaId", "int32", "0+"),
    F("ReplicaDirectoryId", "uuid", "2+"),
    F("LogEndOffset", "int64", "0+"),
    F("LastFetchTimestamp", "int64", "1+", default=-1),
    F("LastCaughtUpTimestamp", "int64", "1+", default=-1),
)

DESCRIBE_QUORUM_RESPONSE = MessageSchema(
    "DescribeQuorumResponse",
    api_key=55,
    valid_versions="0-2",
    flexible_versions="0+",
    fields=(
        F("ErrorCode", "int16", "0+"),
        F("ErrorMessage", "string", "2+", nullable_versions="2+", default=None),
        F("Topics", "[]TopicData", "0+", fields=(
            F("TopicName", "string", "0+"),
            F("Partitions", "[]PartitionData", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("ErrorCode", "int16", "0+"),
                F("ErrorMessage", "string", "2+", nullable_versions="2+", default=None),
                F("LeaderId", "int32", "0+"),
                F("LeaderEpoch", "int32", "0+"),
                F("HighWatermark", "int64", "0+"),
                F("CurrentVoters", "[]ReplicaState", "0+", fields=_REPLICA_STATE),
                F("Observers", "[]ReplicaState", "0+", fields=_REPLICA_STATE),
            )),
        )),
        F("Nodes", "[]Node", "2+", fields=(
            F("NodeId", "int32", "2+"),
            F("Listeners", "[]Listener", "2+", fields=(
                F("Name", "string", "2+"),
                F("Host", "string", "2+"),
                F("Port", "uint16", "2+"),
            )),
        )),
        # kraft-spark's own tagged field (Kafka skips unknown tags): the cluster id, which
        # Kafka's tool learns from a Metadata request that this quorum does not serve.
        F("KraftSparkClusterId", "string", "0+", nullable_versions="0+", default=None,
          tag=10000, tagged_versions="0+"),
        # ...and the voters' endpoints, so a client given any one node finds the leader
        # (Kafka's DescribeQuorum v2 carries them as Nodes; this is the same for v0-1).
        F("KraftSparkNodeEndpoints", "[]NodeEndpoint", "0+", tag=10001, tagged_versions="0+",
          fields=(
              F("NodeId", "int32", "0+"),
              F("Host", "string", "0+"),
              F("Port", "int32", "0+"),
          )),
        # ...and KIP-630's state of the leader's log: where it starts, its newest snapshot.
        F("KraftSparkLogStart", "LogStart", "0+", tag=10002, tagged_versions="0+", fields=(
            F("LogStartOffset", "int64", "0+", default=-1),
            F("SnapshotEndOffset", "int64", "0+", default=-1),
            F("SnapshotEpoch", "int32", "0+", default=-1),
        )),
        # ...and the voter set a reassignment in progress moves to (the KIP-595 source
        # documents' TargetVoters; empty: none in progress).
        F("KraftSparkTargetVoters", "[]int32", "0+", tag=10003, tagged_versions="0+"),
    ),
)

# -- FetchSnapshot (59), KIP-630 -----------------------------------------------------------------

FETCH_SNAPSHOT_REQUEST = MessageSchema(
    "FetchSnapshotRequest",
    api_key=59,
    valid_versions="0",
    flexible_versions="0+",
    fields=(
        F("ClusterId", "string", "0+", nullable_versions="0+", default=None, tag=0,
          tagged_versions="0+"),
        F("ReplicaId", "int32", "0+", default=-1),
        F("MaxBytes", "int32", "0+", default=0x7FFFFFFF),
        F("Topics", "[]TopicSnapshot", "0+", fields=(
            F("Name", "string", "0+"),
            F("Partitions", "[]PartitionSnapshot", "0+", fields=(
                F("Partition", "int32", "0+"),
                F("CurrentLeaderEpoch", "int32", "0+"),
                F("SnapshotId", "SnapshotId", "0+", fields=(
                    F("EndOffset", "int64", "0+"),
                    F("Epoch", "int32", "0+"),
                )),
                F("Position", "int64", "0+"),
            )),
        )),
    ),
)

FETCH_SNAPSHOT_RESPONSE = MessageSchema(
    "FetchSnapshotResponse",
    api_key=59,
    valid_versions="0",
    flexible_versions="0+",
    fields=(
        F("ThrottleTimeMs", "int32", "0+", default=0),
        F("ErrorCode", "int16", "0+", default=0),
        F("Topics", "[]TopicSnapshot", "0+", fields=(
            F("Name", "string", "0+"),
            F("Partitions", "[]PartitionSnapshot", "0+", fields=(
                F("Index", "int32", "0+"),
                F("ErrorCode", "int16", "0+", default=0),
                F("SnapshotId", "SnapshotId", "0+", fields=(
                    F("EndOffset", "int64", "0+"),
                    F("Epoch", "int32", "0+"),
                )),
                F("CurrentLeader", "LeaderIdAndEpoch", "0+", tag=0, tagged_versions="0+",
                  fields=(
                      F("LeaderId", "int32", "0+", default=-1),
                      F("LeaderEpoch", "int32", "0+", default=-1),
                  )),
                F("Size", "int64", "0+"),
                F("Position", "int64", "0+"),
                F("UnalignedRecords", "records", "0+"),
            )),
        )),
    ),
)

ALL_SCHEMAS: tuple[MessageSchema, ...] = (
    REQUEST_HEADER,
    RESPONSE_HEADER,
    API_VERSIONS_REQUEST,
    API_VERSIONS_RESPONSE,
    PRODUCE_REQUEST,
    PRODUCE_RESPONSE,
    FETCH_REQUEST,
    FETCH_RESPONSE,
    VOTE_REQUEST,
    VOTE_RESPONSE,
    BEGIN_QUORUM_EPOCH_REQUEST,
    BEGIN_QUORUM_EPOCH_RESPONSE,
    END_QUORUM_EPOCH_REQUEST,
    END_QUORUM_EPOCH_RESPONSE,
    DESCRIBE_QUORUM_REQUEST,
    DESCRIBE_QUORUM_RESPONSE,
    FETCH_SNAPSHOT_REQUEST,
    FETCH_SNAPSHOT_RESPONSE,
)
"""Every schema, for table-driven tests and validation."""
# fmt: on
