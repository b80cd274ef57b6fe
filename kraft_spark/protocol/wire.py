"""Core messages ↔ Kafka wire bodies (the dicts of ``kraft_spark.protocol``).

The core speaks in dataclasses (``kraft_spark.raft.messages``); the wire speaks Kafka's schemas,
every request naming the topic ``__cluster_metadata`` partition 0. This module is the only place
that knows both. Decoding is strict about shape (exactly one topic and partition, the right
topic name, exactly one record batch in a Produce) and raises :class:`WireError`, which the node
answers with an error code and never lets escape.

Conventions:

* A request's ``ClusterId`` may be null (Kafka's clients leave it out): that is accepted and
  treated as the receiver's own cluster id. A non-null foreign id is refused by the core with
  INCONSISTENT_CLUSTER_ID.
* Errors go where Kafka puts them: INCONSISTENT_CLUSTER_ID at the top level of a response,
  everything else on the partition.
* Produce v10's ``CurrentLeader`` (KIP-951) names the leader; on success its ``LeaderEpoch`` is
  the epoch of the batch that holds the records (the current epoch except for a deduplicated
  retry of a batch appended in an earlier epoch).
"""

from __future__ import annotations

from typing import Any

from kraft_spark.log.codec import decode_batches, encode_batch
from kraft_spark.log.errors import CorruptRecordError
from kraft_spark.protocol import (
    METADATA_TOPIC,
    ApiKey,
    ErrorCode,
    wire_elections,
    wire_reads,
    wire_snapshot,
    wire_voters,
)
from kraft_spark.protocol.wire_elections import split_error
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.messages import (
    AddVoterRequest,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    ProduceRequest,
    ProduceResponse,
    ReadIndexRequest,
    ReadIndexResponse,
    RemoveVoterRequest,
    ReplicaState,
    Request,
    Response,
    UpdateVoterRequest,
    VoterChangeResponse,
    VoteRequest,
    VoteResponse,
)
from kraft_spark.raft.messages import ErrorCode as CoreError
from kraft_spark.raft.records import Batch, Record
from kraft_spark.raft.voter_set import NIL_DIRECTORY, Endpoint

Body = dict[str, Any]

# The versions this node sends. Responses are encoded at the version the request came in.
VERSIONS: dict[int, int] = {
    ApiKey.PRODUCE: 10,
    ApiKey.FETCH: 12,
    **wire_elections.VERSIONS,
    ApiKey.DESCRIBE_QUORUM: 2,
    ApiKey.FETCH_SNAPSHOT: wire_snapshot.VERSION,
    ApiKey.READ_INDEX: wire_reads.VERSION,
}

ACKS_ALL = -1


class WireError(Exception):
    """A request or response that is well-formed Kafka but not a valid quorum message."""

    def __init__(self, message: str, error: int = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.error = error


def _core_error(code: int) -> CoreError:
    try:
        return CoreError(code)
    except ValueError as exc:
        raise WireError(f"unexpected error code {code} from a peer") from exc


def _only(items: Any, what: str) -> Body:
    if not isinstance(items, list) or len(items) != 1:
        count = len(items) if isinstance(items, list) else "no"
        raise WireError(f"expected exactly one {what}, got {count}")
    item: Body = items[0]
    return item


def _partition(body: Body, topic_key: str, name_key: str, what: str) -> Body:
    topic = _only(body.get("topics"), f"topic in {what}")
    if topic.get(name_key) != METADATA_TOPIC:
        raise WireError(
            f"{what} names topic {topic.get(name_key)!r}; this quorum only serves "
            f"{METADATA_TOPIC!r} partition 0"
        )
    part = _only(topic.get(topic_key), f"partition in {what}")
    index = part.get("partition_index", part.get("partition", part.get("index")))
    if index != 0:
        raise WireError(f"{what} names partition {index}; only partition 0 exists")
    return part


def _topics(partition: Body, name_key: str = "topic_name") -> list[Body]:
    return [{name_key: METADATA_TOPIC, "partitions": [partition]}]


def _cluster(value: str | None, local_cluster_id: str) -> str:
    return local_cluster_id if value is None else value


# --------------------------------------------------------------------------- batches


def encode_batches(batches: tuple[Batch, ...] | list[Batch]) -> bytes:
    return b"".join(encode_batch(b) for b in batches)


def decode_record_set(data: bytes | None) -> list[Batch]:
    if not data:
        return []
    try:
        return decode_batches(data)
    except CorruptRecordError as exc:
        raise WireError(f"invalid record batch: {exc}", ErrorCode.CORRUPT_MESSAGE) from exc


def produce_batch(
    records: tuple[Record, ...],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """The record batch a client puts in a Produce (base offset 0, epoch -1, as Kafka's)."""
    return encode_batch(
        Batch(
            base_offset=0,
            epoch=-1,
            records=records,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )
    )


# --------------------------------------------------------------------------- requests


def request_to_wire(msg: Request) -> tuple[int, int, Body]:
    """``(api_key, api_version, body)`` of a core request."""
    part: Body
    if isinstance(msg, FetchRequest):
        part = {
            "partition": 0,
            "current_leader_epoch": msg.current_leader_epoch,
            "fetch_offset": msg.fetch_offset,
            "last_fetched_epoch": msg.last_fetched_epoch,
            "log_start_offset": -1,
            "partition_max_bytes": msg.max_bytes,
        }
        body: Body = {
            "cluster_id": msg.cluster_id,
            "replica_id": msg.replica_id,
            "max_wait_ms": msg.max_wait_ms,
            "min_bytes": 0,
            "max_bytes": msg.max_bytes,
            "topics": [{"topic": METADATA_TOPIC, "partitions": [part]}],
            "forgotten_topics_data": [],
            "kraft_spark_catching_up": msg.catching_up,
            "kraft_spark_replica_directory_id": msg.directory_id,
        }
        return ApiKey.FETCH, VERSIONS[ApiKey.FETCH], body
    if isinstance(msg, FetchSnapshotRequest):
        return wire_snapshot.request_to_wire(msg)
    if isinstance(msg, VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest):
        return wire_elections.request_to_wire(msg)
    if isinstance(msg, ProduceRequest):
        data = produce_batch(
            msg.records,
            producer_id=msg.producer_id,
            producer_epoch=msg.producer_epoch,
            base_sequence=msg.base_sequence,
        )
        body = {
            "transactional_id": None,
            "acks": ACKS_ALL,
            "timeout_ms": msg.timeout_ms,
            "topic_data": [
                {"name": METADATA_TOPIC, "partition_data": [{"index": 0, "records": data}]}
            ],
        }
        return ApiKey.PRODUCE, VERSIONS[ApiKey.PRODUCE], body
    if isinstance(msg, DescribeQuorumRequest):
        return ApiKey.DESCRIBE_QUORUM, VERSIONS[ApiKey.DESCRIBE_QUORUM], {
            "topics": _topics({"partition_index": 0})}
    if isinstance(msg, AddVoterRequest | RemoveVoterRequest | UpdateVoterRequest):
        return wire_voters.request_to_wire(msg)
    if isinstance(msg, ReadIndexRequest):
        return wire_reads.request_to_wire(msg)
    raise TypeError(f"no wire form for {msg!r}")  # pragma: no cover - the union is exhaustive


def request_from_wire(api_key: int, body: Body, local_cluster_id: str) -> Request:
    """The core request of a decoded body; raises :class:`WireError`."""
    if api_key == ApiKey.FETCH_SNAPSHOT:
        try:
            return wire_snapshot.request_from_wire(body, local_cluster_id)
        except wire_snapshot.SnapshotWireError as exc:
            raise WireError(str(exc)) from exc
    if api_key in wire_voters.VOTER_APIS:
        try:
            return wire_voters.request_from_wire(api_key, body)
        except wire_voters.VoterWireError as exc:
            raise WireError(str(exc)) from exc
    if api_key == ApiKey.READ_INDEX:
        return wire_reads.request_from_wire(body)
    if api_key == ApiKey.FETCH:
        topic = _only(body.get("topics"), "topic in Fetch")
        if topic.get("topic") != METADATA_TOPIC:
            raise WireError(f"Fetch names topic {topic.get('topic')!r}; only {METADATA_TOPIC!r}")
        part = _only(topic.get("partitions"), "partition in Fetch")
        if part["partition"] != 0:
            raise WireError(f"Fetch names partition {part['partition']}; only partition 0 exists")
        if part["fetch_offset"] < 0:
            raise WireError(f"negative fetch offset {part['fetch_offset']}")
        return FetchRequest(
            cluster_id=_cluster(body["cluster_id"], local_cluster_id),
            replica_id=body["replica_id"],
            current_leader_epoch=part["current_leader_epoch"],
            fetch_offset=part["fetch_offset"],
            last_fetched_epoch=part["last_fetched_epoch"],
            max_wait_ms=max(0, body["max_wait_ms"]),
            max_bytes=max(1, min(body["max_bytes"], part["partition_max_bytes"])),
            catching_up=bool(body.get("kraft_spark_catching_up", False)),
            directory_id=body.get("kraft_spark_replica_directory_id") or NIL_DIRECTORY,
        )
    if api_key in wire_elections.ELECTION_APIS:
        what = wire_elections.ELECTION_APIS[api_key]
        part = _partition(body, "partitions", "topic_name", what)
        return wire_elections.request_from_wire(
            api_key, body, _cluster(body["cluster_id"], local_cluster_id), part)
    if api_key == ApiKey.PRODUCE:
        if body["transactional_id"] is not None:
            raise WireError("transactional produce is not supported by the metadata quorum")
        if body["acks"] != ACKS_ALL:
            raise WireError(
                f"acks={body['acks']}: the quorum only acknowledges committed records (acks=-1)",
                ErrorCode.INVALID_REQUIRED_ACKS,
            )
        topic = _only(body.get("topic_data"), "topic in Produce")
        if topic.get("name") != METADATA_TOPIC:
            raise WireError(f"Produce names topic {topic.get('name')!r}; only {METADATA_TOPIC!r}")
        part = _only(topic.get("partition_data"), "partition in Produce")
        if part["index"] != 0:
            raise WireError(f"Produce names partition {part['index']}; only partition 0 exists")
        batches = decode_record_set(part["records"])
        if len(batches) != 1:
            raise WireError(
                f"a Produce must carry exactly one record batch, got {len(batches)}",
                ErrorCode.INVALID_RECORD,
            )
        batch = batches[0]
        if batch.is_control:
            raise WireError("clients may not append control batches", ErrorCode.INVALID_RECORD)
        return ProduceRequest(
            records=batch.records,
            timeout_ms=max(0, body["timeout_ms"]),
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
        )
    if api_key == ApiKey.DESCRIBE_QUORUM:
        _partition(body, "partitions", "topic_name", "DescribeQuorum")
        return DescribeQuorumRequest()
    raise WireError(f"api key {api_key} is not a quorum request", ErrorCode.UNSUPPORTED_VERSION)


def error_response_body(api_key: int, error: int, message: str = "") -> Body:
    """A response to a request we could not turn into a core message."""
    if api_key == ApiKey.FETCH:
        fpart = {"partition_index": 0, "error_code": error, "high_watermark": -1, "records": None}
        return {
            "throttle_time_ms": 0,
            "error_code": error,
            "responses": [{"topic": METADATA_TOPIC, "partitions": [fpart]}],
        }
    if api_key == ApiKey.PRODUCE:
        part: Body = {
            "index": 0,
            "error_code": error,
            "base_offset": -1,
            "error_message": message or None,
        }
        return {"responses": [{"name": METADATA_TOPIC, "partition_responses": [part]}]}
    if api_key in (ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
                   ApiKey.DESCRIBE_QUORUM):
        return {"error_code": error, "topics": []}
    if api_key == ApiKey.FETCH_SNAPSHOT:
        return wire_snapshot.error_body(error)
    if api_key in (*wire_voters.VOTER_APIS, ApiKey.DESCRIBE_CLUSTER):
        return wire_voters.error_body(error, message)
    if api_key == ApiKey.READ_INDEX:
        return wire_reads.error_body(error)
    raise WireError(f"no error response for api key {api_key}")


# --------------------------------------------------------------------------- responses


def response_to_wire(
    msg: Response, cluster_id: str, endpoints: list[Body] | None = None
) -> Body:
    """The body of a core response (encoded at the version of the request it answers).
    ``endpoints`` (``{"node_id", "host", "port"}`` per voter) lets clients find the leader."""
    if isinstance(msg, FetchResponse):
        top, err = split_error(msg.error)
        part: Body = {
            "partition_index": 0,
            "error_code": err,
            "high_watermark": msg.high_watermark,
            "current_leader": {"leader_id": msg.leader_id, "leader_epoch": msg.leader_epoch},
            "records": encode_batches(msg.batches) if msg.batches else None,
        }
        if msg.diverging_epoch is not None:
            part["diverging_epoch"] = {
                "epoch": msg.diverging_epoch.epoch,
                "end_offset": msg.diverging_epoch.offset,
            }
        if msg.snapshot_id is not None:  # KIP-630: fetch this snapshot first
            part["snapshot_id"] = {
                "end_offset": msg.snapshot_id.offset, "epoch": msg.snapshot_id.epoch
            }
        part["log_start_offset"] = msg.log_start_offset
        return {
            "throttle_time_ms": 0,
            "error_code": top,
            "responses": [{"topic": METADATA_TOPIC, "partitions": [part]}],
        }
    if isinstance(msg, FetchSnapshotResponse):
        return wire_snapshot.response_to_wire(msg)
    if isinstance(msg, ReadIndexResponse):
        return wire_reads.response_to_wire(msg)
    if isinstance(msg, VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse):
        return wire_elections.response_to_wire(msg, endpoints)
    if isinstance(msg, ProduceResponse):
        ok = msg.error == CoreError.NONE
        part = {
            "index": 0,
            "error_code": int(msg.error),
            "base_offset": msg.base_offset,
            "error_message": msg.message or None,
            "current_leader": {
                "leader_id": msg.leader_id,
                "leader_epoch": msg.epoch if ok and msg.epoch >= 0 else msg.leader_epoch,
            },
        }
        body = {"responses": [{"name": METADATA_TOPIC, "partition_responses": [part]}]}
        if not ok and endpoints:
            body["node_endpoints"] = [e for e in endpoints if e["node_id"] == msg.leader_id]
        return body
    if isinstance(msg, DescribeQuorumResponse):
        snap = msg.latest_snapshot

        def replicas(states: tuple[ReplicaState, ...]) -> list[Body]:
            return [
                {
                    "replica_id": s.replica_id,
                    "log_end_offset": s.log_end_offset,
                    "last_fetch_timestamp": s.last_fetch_timestamp,
                    "last_caught_up_timestamp": s.last_caught_up_timestamp,
                    "replica_directory_id": s.directory_id,
                }
                for s in states
            ]

        part = {
            "partition_index": 0,
            "error_code": int(msg.error),
            "leader_id": msg.leader_id,
            "leader_epoch": msg.leader_epoch,
            "high_watermark": msg.high_watermark,
            "current_voters": replicas(msg.voters),
            "observers": replicas(msg.observers),
        }
        return {
            "error_code": 0,
            "topics": _topics(part),
            "nodes": [
                {"node_id": node_id, "listeners": [
                    {"name": e.name, "host": e.host, "port": e.port} for e in ends]}
                for node_id, ends in msg.endpoints
            ],
            "kraft_spark_cluster_id": cluster_id,
            "kraft_spark_node_endpoints": endpoints or [],
            "kraft_spark_log_start": {
                "log_start_offset": msg.log_start_offset,
                "snapshot_end_offset": snap.offset if snap is not None else -1,
                "snapshot_epoch": snap.epoch if snap is not None else -1,
            },
            "kraft_spark_target_voters": list(msg.target_voters),
        }
    if isinstance(msg, VoterChangeResponse):
        return wire_voters.response_to_wire(msg, endpoints)
    raise TypeError(f"no wire form for {msg!r}")  # pragma: no cover


def first_partition(body: Body, topics_key: str, parts_key: str) -> Body | None:
    """The first partition of the first topic of a response body, None if there is none."""
    topics = body.get(topics_key) or []
    if not topics:
        return None
    parts = topics[0].get(parts_key) or []
    if not parts:
        return None
    part: Body = parts[0]
    return part


def _error_of(body: Body, part: Body | None) -> CoreError:
    top = body.get("error_code", 0)
    if top:
        return _core_error(top)
    return _core_error(part["error_code"] if part is not None else 0)


def response_from_wire(api_key: int, body: Body) -> Response:
    """The core response of a decoded body (what a node gets back from a peer)."""
    if api_key == ApiKey.FETCH_SNAPSHOT:
        try:
            return wire_snapshot.response_from_wire(body)
        except wire_snapshot.SnapshotWireError as exc:
            raise WireError(str(exc)) from exc
    if api_key == ApiKey.FETCH:
        part = first_partition(body, "responses", "partitions")
        if part is None:
            return FetchResponse(_error_of(body, None), -1, -1, -1)
        diverging = part.get("diverging_epoch")
        snapshot = part.get("snapshot_id")
        leader = part.get("current_leader") or {}
        return FetchResponse(
            error=_error_of(body, part),
            leader_id=leader.get("leader_id", -1),
            leader_epoch=leader.get("leader_epoch", -1),
            high_watermark=part["high_watermark"],
            diverging_epoch=(
                OffsetAndEpoch(diverging["end_offset"], diverging["epoch"])
                if diverging is not None and diverging["epoch"] >= 0
                else None
            ),
            batches=tuple(decode_record_set(part["records"])),
            snapshot_id=(
                OffsetAndEpoch(snapshot["end_offset"], snapshot["epoch"])
                if snapshot is not None and snapshot["end_offset"] >= 0
                else None
            ),
            log_start_offset=part.get("log_start_offset", -1),
        )
    if api_key in wire_elections.ELECTION_APIS:
        part = first_partition(body, "topics", "partitions")
        return wire_elections.response_from_wire(api_key, _error_of(body, part), part)
    if api_key == ApiKey.PRODUCE:
        part = first_partition(body, "responses", "partition_responses")
        if part is None:
            return ProduceResponse(_error_of(body, None), -1, -1)
        leader = part.get("current_leader") or {}
        return ProduceResponse(
            error=_core_error(part["error_code"]),
            leader_id=leader.get("leader_id", -1),
            leader_epoch=leader.get("leader_epoch", -1),
            base_offset=part["base_offset"],
            epoch=leader.get("leader_epoch", -1),
            message=part.get("error_message") or "",
        )
    if api_key == ApiKey.DESCRIBE_QUORUM:
        part = first_partition(body, "topics", "partitions")
        if part is None:
            return DescribeQuorumResponse(_error_of(body, None), -1, -1)

        start = body.get("kraft_spark_log_start") or {}

        def states(items: list[Body]) -> tuple[ReplicaState, ...]:
            return tuple(
                ReplicaState(
                    r["replica_id"],
                    r["log_end_offset"],
                    r.get("last_fetch_timestamp", -1),
                    r.get("last_caught_up_timestamp", -1),
                    r.get("replica_directory_id") or NIL_DIRECTORY,
                )
                for r in items
            )

        return DescribeQuorumResponse(
            error=_error_of(body, part),
            leader_id=part["leader_id"],
            leader_epoch=part["leader_epoch"],
            high_watermark=part["high_watermark"],
            voters=states(part["current_voters"]),
            observers=states(part["observers"]),
            log_start_offset=start.get("log_start_offset", -1),
            latest_snapshot=(
                OffsetAndEpoch(start["snapshot_end_offset"], start["snapshot_epoch"])
                if start.get("snapshot_end_offset", -1) >= 0 else None
            ),
            endpoints=tuple(
                (n["node_id"], tuple(Endpoint(e["name"], e["host"], e["port"])
                                     for e in n["listeners"]))
                for n in body.get("nodes") or ()
            ),
            target_voters=tuple(body.get("kraft_spark_target_voters") or ()),
        )
    if api_key in wire_voters.VOTER_APIS:
        return wire_voters.response_from_wire(body)
    if api_key == ApiKey.READ_INDEX:
        try:
            return wire_reads.response_from_wire(body)
        except ValueError as exc:
            raise WireError(f"ReadIndex: {exc}") from exc
    raise WireError(f"api key {api_key} is not a quorum response")
