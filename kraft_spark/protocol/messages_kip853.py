"""Schemas of KIP-853's quorum administration and KIP-919's DescribeCluster, field for field
as in Kafka's message JSON (``AddRaftVoterRequest.json`` and so on).

| message         | versions | flexible | notes                                                 |
| --------------- | -------- | -------- | ----------------------------------------------------- |
| AddRaftVoter    | 0        | 0+       | api key 80                                            |
| RemoveRaftVoter | 0        | 0+       | api key 81                                            |
| UpdateRaftVoter | 0        | 0+       | api key 82: a voter's new listeners                   |
| DescribeCluster | 0-1      | 0+       | api key 60; v1's EndpointType 2 asks for controllers  |
"""

from __future__ import annotations

from kraft_spark.protocol.fields import Field
from kraft_spark.protocol.schema import MessageSchema

F = Field

# fmt: off

_LISTENER = (
    F("Name", "string", "0+"),
    F("Host", "string", "0+"),
    F("Port", "uint16", "0+"),
)

# kraft-spark's tagged field (Kafka skips unknown tags): the voter set a ``metadata-quorum
# reassign`` step moves to, which the leader shows in DescribeQuorum until it is reached.
_TARGET_VOTERS = F("KraftSparkTargetVoters", "[]int32", "0+", tag=10000, tagged_versions="0+")

ADD_RAFT_VOTER_REQUEST = MessageSchema(
    "AddRaftVoterRequest",
    api_key=80,
    valid_versions="0",
    flexible_versions="0+",
    fields=(
        F("ClusterId", "string", "0+", nullable_versions="0+", default=None),
        F("TimeoutMs", "int32", "0+"),
        F("VoterId", "int32", "0+"),
        F("VoterDirectoryId", "uuid", "0+"),
        F("Listeners", "[]Listener", "0+", fields=_LISTENER),
        _TARGET_VOTERS,
    ),
)

_VOTER_CHANGE_RESPONSE_FIELDS = (
    F("ThrottleTimeMs", "int32", "0+"),
    F("ErrorCode", "int16", "0+"),
    F("ErrorMessage", "string", "0+", nullable_versions="0+", default=None),
)

ADD_RAFT_VOTER_RESPONSE = MessageSchema(
    "AddRaftVoterResponse",
    api_key=80,
    valid_versions="0",
    flexible_versions="0+",
    fields=_VOTER_CHANGE_RESPONSE_FIELDS,
)

REMOVE_RAFT_VOTER_REQUEST = MessageSchema(
    "RemoveRaftVoterRequest",
    api_key=81,
    valid_versions="0",
    flexible_versions="0+",
    fields=(
        F("ClusterId", "string", "0+", nullable_versions="0+", default=None),
        F("VoterId", "int32", "0+"),
        F("VoterDirectoryId", "uuid", "0+"),
        _TARGET_VOTERS,
    ),
)

REMOVE_RAFT_VOTER_RESPONSE = MessageSchema(
    "RemoveRaftVoterResponse",
    api_key=81,
    valid_versions="0",
    flexible_versions="0+",
    fields=_VOTER_CHANGE_RESPONSE_FIELDS,
)

UPDATE_RAFT_VOTER_REQUEST = MessageSchema(
    "UpdateRaftVoterRequest",
    api_key=82,
    valid_versions="0",
    flexible_versions="0+",
    fields=(
        F("ClusterId", "string", "0+", nullable_versions="0+", default=None),
        F("CurrentLeaderEpoch", "int32", "0+"),
        F("VoterId", "int32", "0+"),
        F("VoterDirectoryId", "uuid", "0+"),
        F("Listeners", "[]Listener", "0+", fields=_LISTENER),
        F("KRaftVersionFeature", "KRaftVersionFeature", "0+", fields=(
            F("MinSupportedVersion", "int16", "0+"),
            F("MaxSupportedVersion", "int16", "0+"),
        )),
    ),
)

UPDATE_RAFT_VOTER_RESPONSE = MessageSchema(
    "UpdateRaftVoterResponse",
    api_key=82,
    valid_versions="0",
    flexible_versions="0+",
    fields=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("ErrorCode", "int16", "0+"),
        F("CurrentLeader", "CurrentLeader", "0+", tag=0, tagged_versions="0+", fields=(
            F("LeaderId", "int32", "0+", default=-1),
            F("LeaderEpoch", "int32", "0+", default=-1),
            F("Host", "string", "0+"),
            F("Port", "int32", "0+"),
        )),
    ),
)

DESCRIBE_CLUSTER_REQUEST = MessageSchema(
    "DescribeClusterRequest",
    api_key=60,
    valid_versions="0-1",
    flexible_versions="0+",
    fields=(
        F("IncludeClusterAuthorizedOperations", "bool", "0+"),
        F("EndpointType", "int8", "1+", default=1),
    ),
)

DESCRIBE_CLUSTER_RESPONSE = MessageSchema(
    "DescribeClusterResponse",
    api_key=60,
    valid_versions="0-1",
    flexible_versions="0+",
    fields=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("ErrorCode", "int16", "0+"),
        F("ErrorMessage", "string", "0+", nullable_versions="0+", default=None),
        F("EndpointType", "int8", "1+", default=1),
        F("ClusterId", "string", "0+"),
        F("ControllerId", "int32", "0+", default=-1),
        F("Brokers", "[]DescribeClusterBroker", "0+", fields=(
            F("BrokerId", "int32", "0+"),
            F("Host", "string", "0+"),
            F("Port", "int32", "0+"),
            F("Rack", "string", "0+", nullable_versions="0+", default=None),
        )),
        F("ClusterAuthorizedOperations", "int32", "0+", default=-2147483648),
    ),
)

ALL_KIP853_SCHEMAS: tuple[MessageSchema, ...] = (
    ADD_RAFT_VOTER_REQUEST,
    ADD_RAFT_VOTER_RESPONSE,
    REMOVE_RAFT_VOTER_REQUEST,
    REMOVE_RAFT_VOTER_RESPONSE,
    UPDATE_RAFT_VOTER_REQUEST,
    UPDATE_RAFT_VOTER_RESPONSE,
    DESCRIBE_CLUSTER_REQUEST,
    DESCRIBE_CLUSTER_RESPONSE,
)
# fmt: on
