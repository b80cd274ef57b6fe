"""The quorum's client library: ``AsyncQuorumClient`` (asyncio) and ``QuorumClient`` (blocking).

    from kraft_spark.client import QuorumClient, NewRecord
    with QuorumClient(["127.0.0.1:9093"]) as client:
        result = client.append([NewRecord(b"k", b'{"v": 1}')])
        print(result.base_offset, result.epoch, client.describe_quorum().leader_id)
"""

from kraft_spark.client.blocking import QuorumClient
from kraft_spark.client.client import AsyncQuorumClient, parse_bootstrap
from kraft_spark.client.errors import (
    AuthenticationError,
    ClientError,
    ClusterIdMismatchError,
    CommitTimeoutError,
    InvalidRecordError,
    NoLeaderError,
    NotKafkaEndpointError,
    RecordTooLargeError,
)
from kraft_spark.client.kv import (
    AsyncKvClient,
    ConditionFailedError,
    KeyValue,
    KvClient,
    KvError,
)
from kraft_spark.client.types import (
    AppendResult,
    CommittedRecord,
    NewRecord,
    QuorumInfo,
    ReplicaInfo,
)

__all__ = [
    "AppendResult",
    "AsyncKvClient",
    "AsyncQuorumClient",
    "AuthenticationError",
    "ClientError",
    "ClusterIdMismatchError",
    "CommitTimeoutError",
    "CommittedRecord",
    "ConditionFailedError",
    "InvalidRecordError",
    "KeyValue",
    "KvClient",
    "KvError",
    "NewRecord",
    "NoLeaderError",
    "NotKafkaEndpointError",
    "QuorumClient",
    "QuorumInfo",
    "RecordTooLargeError",
    "ReplicaInfo",
    "parse_bootstrap",
]
