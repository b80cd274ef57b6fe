"""FetchSnapshot (api key 59, KIP-630) ↔ Kafka wire bodies; the rest is in ``wire``.

The request names ``__cluster_metadata`` partition 0, the snapshot (EndOffset, Epoch) and a
byte position; the response carries the snapshot's total size, the position of the chunk and
the chunk itself as ``UnalignedRecords`` (raw file bytes, not whole batches: the receiver checks
the whole file once it is complete).
"""

from __future__ import annotations

from typing import Any

from kraft_spark.protocol import METADATA_TOPIC, ApiKey
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.messages import ErrorCode as CoreError
from kraft_spark.raft.messages import FetchSnapshotRequest, FetchSnapshotResponse

Body = dict[str, Any]
VERSION = 0


class SnapshotWireError(Exception):
    """A FetchSnapshot body that is valid Kafka but not a valid request to this quorum."""


def _snapshot_id(value: Body) -> OffsetAndEpoch:
    return OffsetAndEpoch(value["end_offset"], value["epoch"])


def _only_partition(body: Body, what: str) -> Body:
    topics = body.get("topics") or []
    if len(topics) != 1 or topics[0].get("name") != METADATA_TOPIC:
        raise SnapshotWireError(f"{what} must name exactly the topic {METADATA_TOPIC!r}")
    parts = topics[0].get("partitions") or []
    if len(parts) != 1:
        raise SnapshotWireError(f"{what} must name exactly one partition")
    part: Body = parts[0]
    return part


def request_to_wire(msg: FetchSnapshotRequest) -> tuple[int, int, Body]:
    part = {
        "partition": 0,
        "current_leader_epoch": msg.current_leader_epoch,
        "snapshot_id": {"end_offset": msg.snapshot_id.offset, "epoch": msg.snapshot_id.epoch},
        "position": msg.position,
    }
    body = {
        "cluster_id": msg.cluster_id,
        "replica_id": msg.replica_id,
        "max_bytes": msg.max_bytes,
        "topics": [{"name": METADATA_TOPIC, "partitions": [part]}],
    }
    return ApiKey.FETCH_SNAPSHOT, VERSION, body


def request_from_wire(body: Body, local_cluster_id: str) -> FetchSnapshotRequest:
    part = _only_partition(body, "FetchSnapshot")
    if part["partition"] != 0:
        raise SnapshotWireError(f"FetchSnapshot names partition {part['partition']}; only 0")
    cluster = body.get("cluster_id")
    return FetchSnapshotRequest(
        cluster_id=local_cluster_id if cluster is None else cluster,
        replica_id=body["replica_id"],
        current_leader_epoch=part["current_leader_epoch"],
        snapshot_id=_snapshot_id(part["snapshot_id"]),
        position=part["position"],
        max_bytes=max(1, body["max_bytes"]),
    )


def response_to_wire(msg: FetchSnapshotResponse) -> Body:
    top = int(msg.error) if msg.error == CoreError.INCONSISTENT_CLUSTER_ID else 0
    sid = msg.snapshot_id or OffsetAndEpoch(-1, -1)
    part = {
        "index": 0,
        "error_code": 0 if top else int(msg.error),
        "snapshot_id": {"end_offset": sid.offset, "epoch": sid.epoch},
        "current_leader": {"leader_id": msg.leader_id, "leader_epoch": msg.leader_epoch},
        "size": msg.size,
        "position": msg.position,
        "unaligned_records": msg.data,
    }
    return {
        "throttle_time_ms": 0,
        "error_code": top,
        "topics": [{"name": METADATA_TOPIC, "partitions": [part]}],
    }


def error_body(error: int) -> Body:
    return {"throttle_time_ms": 0, "error_code": error, "topics": []}


def response_from_wire(body: Body) -> FetchSnapshotResponse:
    top = body.get("error_code", 0)
    topics = body.get("topics") or []
    parts = topics[0].get("partitions") or [] if topics else []
    if top or not parts:
        return FetchSnapshotResponse(_core_error(top), -1, -1)
    part = parts[0]
    leader = part.get("current_leader") or {}
    sid = _snapshot_id(part["snapshot_id"])
    return FetchSnapshotResponse(
        error=_core_error(part["error_code"]),
        leader_id=leader.get("leader_id", -1),
        leader_epoch=leader.get("leader_epoch", -1),
        snapshot_id=sid if sid.offset >= 0 else None,
        size=part["size"],
        position=part["position"],
        data=bytes(part["unaligned_records"] or b""),
    )


def _core_error(code: int) -> CoreError:
    try:
        return CoreError(code)
    except ValueError as exc:
        raise SnapshotWireError(f"unexpected error code {code} from a peer") from exc
