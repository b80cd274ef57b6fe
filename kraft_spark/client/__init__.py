"""The quorum's client library: ``AsyncQuorumClient`` (asyncio) and ``QuorumClient`` (blocking),
and the store's over HTTP: ``KvClient`` and ``AsyncKvClient`` (``kraft_spark.client.kv``).

    from kraft_spark.client import QuorumClient, NewRecord
    with QuorumClient(["127.0.0.1:9093"]) as client:
        result = client.append([NewRecord(b"k", b'{"v": 1}')])
        print(result.base_offset, result.epoch, client.describe_quorum().leader_id)

Each name is imported from its module on first use (PEP 562): the store's clients do not load
the Kafka-protocol client (the Raft records, the wire codecs: ~0.1 s), so ``kraft-spark kv``
starts without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from kraft_spark.client.kv import AsyncKvClient, KvClient
    from kraft_spark.client.kv_types import ConditionFailedError, KeyValue, KvError
    from kraft_spark.client.types import (
        AppendResult,
        CommittedRecord,
        NewRecord,
        QuorumInfo,
        ReplicaInfo,
    )

# name -> the module that defines it
_HOMES: dict[str, str] = {
    "QuorumClient": "kraft_spark.client.blocking",
    "AsyncQuorumClient": "kraft_spark.client.client",
    "parse_bootstrap": "kraft_spark.client.client",
    **dict.fromkeys(("AuthenticationError", "ClientError", "ClusterIdMismatchError",
                     "CommitTimeoutError", "InvalidRecordError", "NoLeaderError",
                     "NotKafkaEndpointError", "RecordTooLargeError"),
                    "kraft_spark.client.errors"),
    "AsyncKvClient": "kraft_spark.client.kv",
    "KvClient": "kraft_spark.client.kv",
    **dict.fromkeys(("ConditionFailedError", "KeyValue", "KvError"),
                    "kraft_spark.client.kv_types"),
    **dict.fromkeys(("AppendResult", "CommittedRecord", "NewRecord", "QuorumInfo",
                     "ReplicaInfo"), "kraft_spark.client.types"),
}

# The same names as _HOMES (tests/client/test_lazy_package.py checks).
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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
