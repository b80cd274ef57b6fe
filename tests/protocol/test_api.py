"""Whole messages: header selection, API table, unsupported versions, fuzzed frames."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_spark.protocol import (
    API_SPECS,
    ApiKey,
    EncodeError,
    ErrorCode,
    ProtocolError,
    UnsupportedVersionError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    error_name,
    request_header_version,
    response_header_version,
    supported_api_versions,
)

from .strategies import body_strategy

API_CASES = [(k, v) for k, s in API_SPECS.items() for v in range(s.min_version, s.max_version + 1)]
API_IDS = [f"{ApiKey(k).name}-v{v}" for k, v in API_CASES]
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_supported_versions_table() -> None:
    assert supported_api_versions() == [
        {"api_key": 0, "min_version": 9, "max_version": 10},
        {"api_key": 1, "min_version": 12, "max_version": 12},
        {"api_key": 3, "min_version": 9, "max_version": 13},
        {"api_key": 17, "min_version": 0, "max_version": 1},  # SaslHandshake
        {"api_key": 18, "min_version": 0, "max_version": 3},
        {"api_key": 36, "min_version": 0, "max_version": 2},  # SaslAuthenticate
        {"api_key": 52, "min_version": 0, "max_version": 2},
        {"api_key": 53, "min_version": 0, "max_version": 1},
        {"api_key": 54, "min_version": 0, "max_version": 1},
        {"api_key": 55, "min_version": 0, "max_version": 2},
        {"api_key": 59, "min_version": 0, "max_version": 0},
        {"api_key": 60, "min_version": 0, "max_version": 1},
        {"api_key": 80, "min_version": 0, "max_version": 0},
        {"api_key": 81, "min_version": 0, "max_version": 0},
        {"api_key": 82, "min_version": 0, "max_version": 0},
        {"api_key": 10000, "min_version": 0, "max_version": 0},  # kraft-spark's ReadIndex
        {"api_key": 10001, "min_version": 0, "max_version": 0},  # and LeaseCountdown
    ]


@pytest.mark.parametrize(
    ("api_key", "version", "request_header", "response_header"),
    [
        (ApiKey.PRODUCE, 9, 2, 1),
        (ApiKey.FETCH, 12, 2, 1),
        (ApiKey.API_VERSIONS, 0, 1, 0),
        (ApiKey.API_VERSIONS, 2, 1, 0),
        (ApiKey.API_VERSIONS, 3, 2, 0),  # ApiVersions responses always use header v0
        (ApiKey.VOTE, 0, 2, 1),
        (ApiKey.BEGIN_QUORUM_EPOCH, 0, 1, 0),
        (ApiKey.END_QUORUM_EPOCH, 0, 1, 0),
        (ApiKey.DESCRIBE_QUORUM, 0, 2, 1),
        (ApiKey.DESCRIBE_QUORUM, 1, 2, 1),
    ],
)
def test_header_versions(
    api_key: int, version: int, request_header: int, response_header: int
) -> None:
    assert request_header_version(api_key, version) == request_header
    assert response_header_version(api_key, version) == response_header


def test_error_codes_match_kafka() -> None:
    expected = {
        "NONE": 0,
        "OFFSET_OUT_OF_RANGE": 1,
        "CORRUPT_MESSAGE": 2,
        "UNKNOWN_TOPIC_OR_PARTITION": 3,
        "NOT_LEADER_OR_FOLLOWER": 6,
        "REQUEST_TIMED_OUT": 7,
        "MESSAGE_TOO_LARGE": 10,
        "UNSUPPORTED_VERSION": 35,
        "INVALID_REQUEST": 42,
        "OUT_OF_ORDER_SEQUENCE_NUMBER": 45,
        "DUPLICATE_SEQUENCE_NUMBER": 46,
        "FENCED_LEADER_EPOCH": 74,
        "UNKNOWN_LEADER_EPOCH": 75,
        "INVALID_RECORD": 87,
        "INCONSISTENT_VOTER_SET": 94,
        "INCONSISTENT_CLUSTER_ID": 104,
    }
    for name, code in expected.items():
        assert ErrorCode[name] == code
    assert error_name(74) == "FENCED_LEADER_EPOCH"
    assert error_name(99) == "UNKNOWN(99)"


@pytest.mark.parametrize(("api_key", "version"), API_CASES, ids=API_IDS)
@PROPERTY
@given(data=st.data())
def test_request_and_response_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    spec = API_SPECS[api_key]
    corr = data.draw(st.integers(-(2**31), 2**31 - 1))
    client_id = data.draw(st.none() | st.text(max_size=8))
    request = data.draw(body_strategy(spec.request, version))
    frame = encode_request(api_key, version, corr, client_id, request)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    header, body = decode_request(frame[4:])
    assert (header.api_key, header.api_version) == (api_key, version)
    assert (header.correlation_id, header.client_id) == (corr, client_id)
    assert body == request

    response = data.draw(body_strategy(spec.response, version))
    frame = encode_response(api_key, version, corr, response)
    assert decode_response(api_key, version, frame[4:]) == (corr, response)


@pytest.mark.parametrize(("api_key", "version"), API_CASES, ids=API_IDS)
@settings(max_examples=40, deadline=None)
@given(tail=st.binary(max_size=48))
def test_random_payloads_decode_or_raise(api_key: int, version: int, tail: bytes) -> None:
    request_frame = struct.pack(">hhi", api_key, version, 1) + tail
    with contextlib.suppress(ProtocolError):
        decode_request(request_frame)
    with contextlib.suppress(ProtocolError):
        decode_response(api_key, version, tail)


def test_unsupported_version_carries_correlation_id() -> None:
    frame = encode_request(ApiKey.API_VERSIONS, 3, 42, "c", {})[4:]
    bumped = struct.pack(">hh", ApiKey.API_VERSIONS, 4) + frame[4:]
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(bumped)
    assert (info.value.api_key, info.value.api_version) == (18, 4)
    assert info.value.correlation_id == 42
    # the server's answer: an ApiVersions v0 response with UNSUPPORTED_VERSION
    answer = encode_response(
        ApiKey.API_VERSIONS,
        0,
        42,
        {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": supported_api_versions()},
    )
    corr, body = decode_response(ApiKey.API_VERSIONS, 0, answer[4:])
    assert (corr, body["error_code"]) == (42, 35)


def test_unknown_api_key_is_unsupported() -> None:
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(struct.pack(">hhi", 3, 0, 9) + b"\xff\xff")
    assert (info.value.api_key, info.value.correlation_id) == (3, 9)
    assert isinstance(info.value, ProtocolError)


def test_short_request_is_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        decode_request(b"\x00\x34\x00")


def test_local_misuse_is_encode_error() -> None:
    with pytest.raises(EncodeError):
        encode_request(ApiKey.VOTE, 3, 0, None, {})
    with pytest.raises(EncodeError):
        encode_response(99, 0, 0, {})
    with pytest.raises(EncodeError):
        encode_request(ApiKey.VOTE, 0, 2**31, None, {})
    with pytest.raises(EncodeError):
        decode_response(ApiKey.FETCH, 11, b"")
