"""Core messages survive the trip through Kafka's wire format (bytes and back)."""

from __future__ import annotations

from typing import Any

import pytest

from kraft_spark.protocol import (
    ApiKey,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from kraft_spark.protocol.wire import (
    WireError,
    error_response_body,
    request_from_wire,
    request_to_wire,
    response_from_wire,
    response_to_wire,
)
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    ProduceRequest,
    ProduceResponse,
    ReplicaState,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from kraft_spark.raft.records import Batch, LeaderChange, Record, leader_change_batch

pytestmark = pytest.mark.loop_free

CLUSTER = "c1"

REQUESTS: list[Request] = [
    VoteRequest(CLUSTER, 5, 1, 4, 100),
    BeginQuorumEpochRequest(CLUSTER, 2, 7),
    EndQuorumEpochRequest(CLUSTER, 2, 7, (0, 1)),
    FetchRequest(CLUSTER, 2, 7, 55, 6, 500, 1 << 20),
    FetchRequest(CLUSTER, 3, 7, 0, 0, 0, 4096, catching_up=True),
    ProduceRequest((Record(b"k", b"v", 1234, (("h", b"x"), ("n", None))),
                    Record(None, None, 1235)), 3000, 42, 0, 17),
    DescribeQuorumRequest(),
    FetchSnapshotRequest(CLUSTER, 2, 7, OffsetAndEpoch(1000, 6), 4096, 1 << 20),
]


def _through_bytes_request(msg: Request) -> Request:
    api_key, version, body = request_to_wire(msg)
    header, decoded = decode_request(encode_request(api_key, version, 9, "t", body)[4:])
    assert header.api_key == api_key and header.correlation_id == 9
    return request_from_wire(header.api_key, decoded, "local")


@pytest.mark.parametrize("msg", REQUESTS, ids=lambda m: type(m).__name__)
def test_requests_round_trip(msg: Request) -> None:
    assert _through_bytes_request(msg) == msg


def test_null_cluster_id_means_the_receivers_own() -> None:
    api_key, _, body = request_to_wire(VoteRequest(CLUSTER, 5, 1, 4, 100))
    body["cluster_id"] = None
    assert request_from_wire(api_key, body, "mine").cluster_id == "mine"  # type: ignore[union-attr]


BATCHES = (
    Batch(10, 3, (Record(b"a", b"1", 99),), producer_id=5, producer_epoch=0, base_sequence=4),
    leader_change_batch(11, 3, LeaderChange(1, (0, 1, 2), (1, 2)), 100),
)

RESPONSES: list[tuple[int, Response]] = [
    (ApiKey.VOTE, VoteResponse(ErrorCode.NONE, 1, 5, True)),
    (ApiKey.VOTE, VoteResponse(ErrorCode.INCONSISTENT_CLUSTER_ID, -1, 5, False)),
    (ApiKey.BEGIN_QUORUM_EPOCH, BeginQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, 2, 8)),
    (ApiKey.END_QUORUM_EPOCH, EndQuorumEpochResponse(ErrorCode.NONE, -1, 8)),
    (ApiKey.FETCH, FetchResponse(ErrorCode.NONE, 1, 3, 11, None, BATCHES)),
    (ApiKey.FETCH, FetchResponse(ErrorCode.NONE, 1, 3, 11, OffsetAndEpoch(7, 2))),
    (ApiKey.FETCH, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 4, -1)),
    (ApiKey.FETCH, FetchResponse(ErrorCode.NONE, 1, 3, 11, snapshot_id=OffsetAndEpoch(9, 2),
                                 log_start_offset=9)),
    (ApiKey.FETCH, FetchResponse(ErrorCode.OFFSET_OUT_OF_RANGE, 1, 3, 11,
                                 snapshot_id=OffsetAndEpoch(9, 2), log_start_offset=9)),
    (ApiKey.FETCH_SNAPSHOT, FetchSnapshotResponse(
        ErrorCode.NONE, 1, 3, OffsetAndEpoch(9, 2), 5000, 4096, b"\x00raw bytes")),
    (ApiKey.FETCH_SNAPSHOT, FetchSnapshotResponse(ErrorCode.SNAPSHOT_NOT_FOUND, 1, 3)),
    (ApiKey.FETCH_SNAPSHOT, FetchSnapshotResponse(ErrorCode.INCONSISTENT_CLUSTER_ID, -1, -1)),
    (ApiKey.DESCRIBE_QUORUM, DescribeQuorumResponse(
        ErrorCode.NONE, 1, 3, 11, (ReplicaState(1, 12, 1000, 999), ReplicaState(0, 11, 5, 4)),
        (ReplicaState(3000, 10, 900, -1),))),
    (ApiKey.DESCRIBE_QUORUM, DescribeQuorumResponse(
        ErrorCode.NONE, 1, 3, 11, (ReplicaState(1, 12, 1000, 999),), (),
        log_start_offset=9, latest_snapshot=OffsetAndEpoch(9, 2))),
]


@pytest.mark.parametrize("case", RESPONSES, ids=lambda c: type(c[1]).__name__)
def test_responses_round_trip(case: tuple[int, Response]) -> None:
    api_key, msg = case
    version = 12 if api_key == ApiKey.FETCH else (1 if api_key == ApiKey.DESCRIBE_QUORUM else 0)
    body = response_to_wire(msg, CLUSTER)
    frame = encode_response(api_key, version, 3, body)
    corr, decoded = decode_response(api_key, version, frame[4:])
    assert corr == 3
    assert response_from_wire(api_key, decoded) == msg


def test_produce_response_names_the_leader_and_the_batch_epoch() -> None:
    endpoints = [{"node_id": 2, "host": "h", "port": 9}]
    ok = response_to_wire(ProduceResponse(ErrorCode.NONE, 1, 6, 40, 41, 5), CLUSTER, endpoints)
    part = ok["responses"][0]["partition_responses"][0]
    assert (part["base_offset"], part["current_leader"]["leader_epoch"]) == (40, 5)
    assert "node_endpoints" not in ok
    refused = response_to_wire(
        ProduceResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 6), CLUSTER, endpoints
    )
    assert refused["node_endpoints"] == endpoints
    # A Kafka v9 client gets the same answer without the v10 tagged fields.
    _, decoded = decode_response(0, 9, encode_response(0, 9, 1, refused)[4:])
    assert decoded["responses"][0]["partition_responses"][0]["error_code"] == 6


def _produce_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"transactional_id": None, "acks": -1, "timeout_ms": 100,
                            "topic_data": [{"name": "__cluster_metadata",
                                            "partition_data": [{"index": 0, "records": b""}]}]}
    body.update(over)
    return body


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (_produce_body(acks=1), 21),  # INVALID_REQUIRED_ACKS
        (_produce_body(transactional_id="tx"), 42),
        (_produce_body(), 87),  # no batch
        (_produce_body(topic_data=[{"name": "other", "partition_data": []}]), 42),
        (_produce_body(topic_data=[{"name": "__cluster_metadata", "partition_data": [
            {"index": 0, "records": b"\x01" * 80}]}]), 2),  # corrupt batch
    ],
)
def test_invalid_produce_is_refused_with_kafka_codes(body: dict[str, Any], error: int) -> None:
    with pytest.raises(WireError) as info:
        request_from_wire(ApiKey.PRODUCE, body, CLUSTER)
    assert info.value.error == error


def test_only_partition_zero_of_the_metadata_topic() -> None:
    api_key, _, body = request_to_wire(BeginQuorumEpochRequest(CLUSTER, 2, 7))
    body["topics"][0]["partitions"][0]["partition_index"] = 3
    with pytest.raises(WireError, match="partition 3"):
        request_from_wire(api_key, body, CLUSTER)
    body["topics"].append(body["topics"][0])
    with pytest.raises(WireError, match="exactly one topic"):
        request_from_wire(api_key, body, CLUSTER)


def test_a_malformed_fetch_snapshot_is_refused_with_a_wire_error() -> None:
    api_key, _, body = request_to_wire(
        FetchSnapshotRequest(CLUSTER, 2, 7, OffsetAndEpoch(100, 3), 0, 4096)
    )
    body["topics"][0]["partitions"][0]["partition"] = 5
    with pytest.raises(WireError, match="partition 5"):
        request_from_wire(api_key, body, CLUSTER)
    body["topics"][0]["name"] = "other-topic"
    with pytest.raises(WireError, match="__cluster_metadata"):
        request_from_wire(api_key, body, CLUSTER)
    body["topics"] = []
    with pytest.raises(WireError):
        request_from_wire(api_key, body, CLUSTER)
    # The node answers such a request with this body (INVALID_REQUEST at the top level).
    assert error_response_body(api_key, 42) == {"throttle_time_ms": 0, "error_code": 42,
                                                "topics": []}
