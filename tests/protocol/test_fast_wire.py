"""The hand-written Fetch codecs (``kraft_spark.protocol.fast_wire``) agree with the generic path:
the same bytes out, the same messages in, and ``None`` (never a different answer) for any input
the generic path would refuse or read differently."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kraft_spark.protocol import (
    ApiKey,
    ProtocolError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from kraft_spark.protocol.fast_wire import (
    decode_fetch_request,
    decode_fetch_response,
    encode_fetch_request,
    encode_fetch_response,
)
from kraft_spark.protocol.wire import (
    WireError,
    request_from_wire,
    request_to_wire,
    response_from_wire,
    response_to_wire,
)
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.messages import ErrorCode, FetchRequest, FetchResponse
from kraft_spark.raft.records import Batch, Record

pytestmark = pytest.mark.loop_free

LOCAL = "local-cluster-id"
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=40)


def fetch_requests() -> st.SearchStrategy[FetchRequest]:
    return st.builds(
        FetchRequest,
        cluster_id=TEXT,
        replica_id=INT32,
        current_leader_epoch=INT32,
        fetch_offset=st.integers(0, 2**63 - 1),
        last_fetched_epoch=INT32,
        max_wait_ms=INT32,
        max_bytes=INT32,
        catching_up=st.booleans(),
        directory_id=st.uuids() | st.just(uuid.UUID(int=0)),
    )


def batches() -> st.SearchStrategy[tuple[Batch, ...]]:
    record = st.builds(
        Record,
        key=st.none() | st.binary(max_size=20),
        value=st.none() | st.binary(max_size=300),
        timestamp_ms=st.integers(0, 2**40),
    )
    batch = st.builds(
        Batch,
        base_offset=st.integers(0, 2**40),
        epoch=st.integers(0, 2**31 - 1),
        records=st.lists(record, min_size=1, max_size=4).map(tuple),
    )
    return st.lists(batch, max_size=3).map(tuple)


def fetch_responses() -> st.SearchStrategy[FetchResponse]:
    diverging = st.none() | st.builds(
        OffsetAndEpoch, offset=st.integers(-1, 2**40), epoch=st.integers(-1, 2**31 - 1)
    )
    return st.builds(
        FetchResponse,
        error=st.sampled_from(list(ErrorCode)),
        leader_id=st.integers(-1, 2**31 - 1),
        leader_epoch=st.integers(-1, 2**31 - 1),
        high_watermark=st.integers(-1, 2**62),
        diverging_epoch=diverging,
        batches=batches(),
    )


def generic_request_frame(msg: FetchRequest, corr: int, client_id: str | None) -> bytes:
    api_key, version, body = request_to_wire(msg)
    return encode_request(api_key, version, corr, client_id, body)


def generic_request(payload: bytes) -> Any:
    """What the node's generic path makes of a request payload: (header, message) or the
    exception it raises."""
    try:
        header, body = decode_request(payload)
        return header, request_from_wire(header.api_key, body, LOCAL)
    except (ProtocolError, WireError) as exc:
        return exc


def generic_response(payload: bytes) -> Any:
    try:
        _, body = decode_response(ApiKey.FETCH, 12, payload)
        return response_from_wire(ApiKey.FETCH, body)
    except (ProtocolError, WireError) as exc:
        return exc


@settings(max_examples=400, deadline=None)
@given(fetch_requests(), st.integers(0, 2**31 - 1), st.text(max_size=30))
def test_fetch_request_bytes_and_decoding_match_the_generic_path(
    msg: FetchRequest, corr: int, client_id: str
) -> None:
    frame = encode_fetch_request(msg, corr, client_id)
    assert frame == generic_request_frame(msg, corr, client_id)
    decoded = decode_fetch_request(frame[4:], LOCAL)
    assert decoded is not None
    assert decoded == generic_request(frame[4:])


@settings(max_examples=400, deadline=None)
@given(fetch_responses(), st.integers(0, 2**31 - 1))
@example(FetchResponse(ErrorCode.NONE, -1, -1, 5, OffsetAndEpoch(-1, -1)), 1)
@example(FetchResponse(ErrorCode.INCONSISTENT_CLUSTER_ID, -1, 4, -1), 2)
def test_fetch_response_bytes_and_decoding_match_the_generic_path(
    msg: FetchResponse, corr: int
) -> None:
    frame = encode_fetch_response(msg, corr)
    assert frame == encode_response(ApiKey.FETCH, 12, corr, response_to_wire(msg, LOCAL))
    decoded = decode_fetch_response(frame[4:])
    assert decoded is not None
    assert decoded == generic_response(frame[4:])


def mutations() -> st.SearchStrategy[list[tuple[str, int, int]]]:
    op = st.tuples(
        st.sampled_from(["flip", "cut", "insert", "delete"]),
        st.integers(0, 10_000),
        st.integers(0, 255),
    )
    return st.lists(op, min_size=1, max_size=3)


def mutate(data: bytes, ops: list[tuple[str, int, int]]) -> bytes:
    buf = bytearray(data)
    for kind, where, value in ops:
        at = where % (len(buf) + 1)
        if kind == "flip" and at < len(buf):
            buf[at] ^= value or 1
        elif kind == "cut":
            del buf[at:]
        elif kind == "insert":
            buf.insert(at, value)
        elif kind == "delete" and at < len(buf):
            del buf[at]
    return bytes(buf)


@settings(max_examples=1500, deadline=None)
@given(fetch_requests(), st.text(max_size=12), mutations())
def test_mutated_fetch_requests_decode_as_the_generic_path_or_not_at_all(
    msg: FetchRequest, client_id: str, ops: list[tuple[str, int, int]]
) -> None:
    payload = mutate(encode_fetch_request(msg, 7, client_id)[4:], ops)
    fast = decode_fetch_request(payload, LOCAL)
    if fast is not None:
        assert fast == generic_request(payload)


@settings(max_examples=1500, deadline=None)
@given(fetch_responses(), mutations())
# Cut right after the tag count: the decoder once indexed past the end (IndexError).
@example(FetchResponse(ErrorCode.NONE, 0, 0, 0, OffsetAndEpoch(0, 0)), [("cut", 190, 0)])
def test_mutated_fetch_responses_decode_as_the_generic_path_or_not_at_all(
    msg: FetchResponse, ops: list[tuple[str, int, int]]
) -> None:
    payload = mutate(encode_fetch_response(msg, 7)[4:], ops)
    try:
        fast = decode_fetch_response(payload)
    except WireError as exc:
        # A corrupt record batch: the generic path refuses it with the same error.
        generic = generic_response(payload)
        assert isinstance(generic, WireError)
        assert (generic.error, str(generic)) == (exc.error, str(exc))
        return
    if fast is not None:
        assert fast == generic_response(payload)


def test_a_request_without_cluster_id_takes_the_generic_path() -> None:
    """Kafka's clients leave ClusterId out (null): the generic path maps it to our own id."""
    msg = FetchRequest("x", 1, 2, 3, 1, 100, 1000)
    api_key, version, body = request_to_wire(msg)
    body["cluster_id"] = None
    payload = encode_request(api_key, version, 9, "kafka", body)[4:]
    header, decoded = generic_request(payload)
    assert decoded.cluster_id == LOCAL
    fast = decode_fetch_request(payload, LOCAL)
    assert fast is None or fast == (header, decoded)


@pytest.mark.parametrize(
    "change",
    [
        {"topics": [{"topic": "other", "partitions": [{"partition": 0, "fetch_offset": 1,
                                                         "partition_max_bytes": 10}]}]},
        {"rack_id": "rack-1"},
        {"topics": []},
    ],
)
def test_other_shapes_take_the_generic_path(change: dict[str, Any]) -> None:
    msg = FetchRequest(LOCAL, 1, 2, 3, 1, 100, 1000)
    api_key, version, body = request_to_wire(msg)
    body.update(change)
    payload = encode_request(api_key, version, 9, "c", body)[4:]
    assert decode_fetch_request(payload, LOCAL) is None


def test_a_corrupt_batch_in_a_response_is_refused_like_the_generic_path() -> None:
    batch = Batch(base_offset=3, epoch=1, records=(Record(b"k", b"value"),))
    frame = bytearray(encode_fetch_response(FetchResponse(ErrorCode.NONE, 0, 1, 3, None,
                                                          (batch,)), 5))
    at = bytes(frame).index(b"value")
    frame[at] ^= 0xFF  # inside the record batch: its CRC no longer matches
    with pytest.raises(WireError) as fast:
        decode_fetch_response(bytes(frame[4:]))
    generic = generic_response(bytes(frame[4:]))
    assert isinstance(generic, WireError)
    assert fast.value.error == generic.error == ErrorCode.CORRUPT_MESSAGE
