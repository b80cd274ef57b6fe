"""The HTTP API's limits, its pydantic request and response models, the backend it serves
from (``QuorumBackend``) and ``ApiError``: the vocabulary the routes and middlewares share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from kraft_spark.client.types import (
    AppendRecord,
    AppendResult,
    CommittedRecord,
    QuorumInfo,
)

MAX_RECORDS_PER_REQUEST: Final = 1000
MAX_READ_LIMIT: Final = 1000
IDEMPOTENCY_KEYS: Final = 10_000
MAX_IDEMPOTENCY_KEY_CHARS: Final = 255
# Values are served back as JSON, whose serializer stops at 255 levels (the response adds 3):
# a value nested deeper could be stored but never read back over HTTP.
MAX_VALUE_DEPTH: Final = 128
MAX_OFFSET: Final = 2**63 - 1  # Kafka offsets are int64
READY_TIMEOUT_S: Final = 5.0
RETRY_AFTER_S: Final = "1"

RECORD_SHAPE: Final = (
    'A record is {"key": "<non-empty string>", "value": <any JSON; null deletes the key>, '
    '"headers": {"<name>": "<string>"}} (headers optional); '
    'a batch is {"records": [<record>, ...]}.'
)


class QuorumBackend(Protocol):
    """What the sidecar needs from the quorum; ``AsyncQuorumClient`` satisfies it."""

    @property
    def cluster_id(self) -> str | None: ...

    async def append(
        self, records: Sequence[AppendRecord], *, timeout_s: float = ...,
        idempotency_key: str | None = ...,
    ) -> AppendResult:
        """``idempotency_key``: retries of the key through any backend are answered with the
        first append's offsets (the quorum dedupes them: ``AsyncQuorumClient.append``)."""

    async def read(self, from_offset: int, limit: int = ...) -> list[CommittedRecord]: ...

    async def describe_quorum(self) -> QuorumInfo: ...

    async def close(self) -> None: ...


# --------------------------------------------------------------------------- request/response


class RecordIn(BaseModel):
    """One record to append."""

    model_config = ConfigDict(extra="forbid", strict=True)

    key: str = Field(min_length=1, description="The record key (UTF-8).", examples=["topic/a"])
    value: Any = Field(
        description="Any JSON value, stored as compact JSON; null is a tombstone (deletes the "
        "key).",
        examples=[{"partitions": 3}],
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Optional string headers (values stored as UTF-8). The store's "
        "reserved headers (kraft.txn, kraft.lease, kraft.lease.op, kraft.txn.outcome, "
        "kraft.lease.deleted) are refused (422): use conditions, lease_id and /v1/leases."
    )


class BatchIn(BaseModel):
    """Several records, appended atomically at consecutive offsets in this order."""

    model_config = ConfigDict(extra="forbid", strict=True)

    records: list[RecordIn] = Field(min_length=1, max_length=MAX_RECORDS_PER_REQUEST)


AppendRequest = RecordIn | BatchIn


class AppendResponse(BaseModel):
    base_offset: int = Field(description="Offset of the first record.")
    last_offset: int = Field(description="Offset of the last record.")
    epoch: int = Field(description="Leader epoch the batch was appended in.")


class RecordOut(BaseModel):
    offset: int
    epoch: int
    timestamp: int = Field(description="Append time, wall-clock milliseconds.")
    key: str | None
    value: Any = Field(description="The value parsed as JSON, else as a string; null: tombstone.")
    headers: dict[str, str | None]


class ReadResponse(BaseModel):
    records: list[RecordOut]
    next_offset: int = Field(description="The from_offset to ask for next.")


class ReplicaStateOut(BaseModel):
    replicaId: int
    directoryId: str | None = None
    logEndOffset: int
    lastFetchTimestamp: int
    lastCaughtUpTimestamp: int


class QuorumNodeOut(BaseModel):
    """A replica as Kafka 4.x's ``kafka-metadata-quorum.sh describe --status`` shows it."""

    id: int
    directoryId: str | None = Field(description="KIP-853 directory id (null: unknown)")
    endpoints: list[str] = Field([], description="Listeners, NAME://host:port (voters)")


class QuorumOut(BaseModel):
    clusterId: str
    leaderId: int
    leaderEpoch: int
    highWatermark: int
    maxFollowerLag: int
    maxFollowerLagTimeMs: int
    currentVoters: list[QuorumNodeOut]
    currentObservers: list[QuorumNodeOut]
    voters: list[ReplicaStateOut]
    observers: list[ReplicaStateOut]
    logStartOffset: int = Field(
        -1, description="KIP-630: the leader's log start offset (-1: unknown)")
    latestSnapshot: str | None = Field(
        None, description="KIP-630: the leader's newest snapshot, <end offset>-<epoch>")
    httpUrls: dict[str, str] | None = Field(
        None, description="The HTTP API each node serves itself, by node id (where known)")
    leaderHttpUrl: str | None = Field(
        None, description="The leader's own HTTP API: appends sent there take no forwarding "
        "hop (the Python client and the CLI go there)")


class ReplicationRowOut(BaseModel):
    nodeId: int
    directoryId: str | None = None
    logEndOffset: int
    lag: int
    lastFetchTimestamp: int
    lastCaughtUpTimestamp: int
    status: Literal["Leader", "Follower", "Observer"]


class ErrorResponse(BaseModel):
    error: str = Field(description="What went wrong and how to fix it.")


class StatusOut(BaseModel):
    status: str
    leaderId: int | None = None
    leaderEpoch: int | None = None


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """Answered as ``{"error": message, **extra}`` with this status and headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, *,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.extra = extra or {}
