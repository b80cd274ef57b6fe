"""API keys, supported versions, header selection, and whole-message encode/decode.

Header rules (Kafka's): a request uses header v2 when its API version is flexible, else v1
(``ClientId`` is a classic nullable string in both; v2 adds a tagged-field section). A response
uses header v1 (correlation id + tagged fields) when flexible, else v0 — except ApiVersions, whose
response header is always v0 so any client can read the correlation id of any version.

Frames on the wire are ``int32 size`` + payload. ``encode_request``/``encode_response`` return the
complete frame (prefix included); ``decode_request``/``decode_response`` take the payload only,
as produced by :class:`kraft_spark.protocol.framing.FrameDecoder`. A payload must be consumed
exactly: trailing bytes are a protocol error.

Bodies are dicts keyed by snake_case field names (see :mod:`kraft_spark.protocol.schema`).
Error codes sit at the top level of every response except Produce's (per partition only).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from kraft_spark.protocol import messages as m
from kraft_spark.protocol import messages_kip853 as k
from kraft_spark.protocol import messages_metadata as md
from kraft_spark.protocol import messages_sasl as sa
from kraft_spark.protocol import messages_store as st
from kraft_spark.protocol.exceptions import EncodeError, ProtocolError, UnsupportedVersionError
from kraft_spark.protocol.primitives import Reader
from kraft_spark.protocol.schema import MessageSchema

Body = dict[str, Any]

_REQUEST_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
_SIZE = struct.Struct(">i")


class ApiKey(IntEnum):
    """Kafka's API keys for the APIs this codec implements, and kraft-spark's own."""

    PRODUCE = 0
    FETCH = 1
    METADATA = 3
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    SASL_AUTHENTICATE = 36
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    # kraft-spark's own (messages_store.py)
    READ_INDEX = 10000
    LEASE_COUNTDOWN = 10001


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One API: its schemas and the inclusive range of versions we implement."""

    api_key: ApiKey
    request: MessageSchema
    response: MessageSchema
    min_version: int
    max_version: int

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def _spec(key: ApiKey, request: MessageSchema, response: MessageSchema) -> ApiSpec:
    valid = request.valid
    assert valid == response.valid, f"{key.name}: request and response versions differ"
    return ApiSpec(key, request, response, valid.lo, valid.hi)


API_SPECS: dict[int, ApiSpec] = {
    s.api_key: s
    for s in (
        _spec(ApiKey.PRODUCE, m.PRODUCE_REQUEST, m.PRODUCE_RESPONSE),
        _spec(ApiKey.FETCH, m.FETCH_REQUEST, m.FETCH_RESPONSE),
        _spec(ApiKey.METADATA, md.METADATA_REQUEST, md.METADATA_RESPONSE),
        _spec(ApiKey.SASL_HANDSHAKE, sa.SASL_HANDSHAKE_REQUEST, sa.SASL_HANDSHAKE_RESPONSE),
        _spec(ApiKey.API_VERSIONS, m.API_VERSIONS_REQUEST, m.API_VERSIONS_RESPONSE),
        _spec(ApiKey.SASL_AUTHENTICATE, sa.SASL_AUTHENTICATE_REQUEST,
              sa.SASL_AUTHENTICATE_RESPONSE),
        _spec(ApiKey.VOTE, m.VOTE_REQUEST, m.VOTE_RESPONSE),
        _spec(
            ApiKey.BEGIN_QUORUM_EPOCH, m.BEGIN_QUORUM_EPOCH_REQUEST, m.BEGIN_QUORUM_EPOCH_RESPONSE
        ),
        _spec(ApiKey.END_QUORUM_EPOCH, m.END_QUORUM_EPOCH_REQUEST, m.END_QUORUM_EPOCH_RESPONSE),
        _spec(ApiKey.DESCRIBE_QUORUM, m.DESCRIBE_QUORUM_REQUEST, m.DESCRIBE_QUORUM_RESPONSE),
        _spec(ApiKey.FETCH_SNAPSHOT, m.FETCH_SNAPSHOT_REQUEST, m.FETCH_SNAPSHOT_RESPONSE),
        _spec(ApiKey.DESCRIBE_CLUSTER, k.DESCRIBE_CLUSTER_REQUEST, k.DESCRIBE_CLUSTER_RESPONSE),
        _spec(ApiKey.ADD_RAFT_VOTER, k.ADD_RAFT_VOTER_REQUEST, k.ADD_RAFT_VOTER_RESPONSE),
        _spec(ApiKey.REMOVE_RAFT_VOTER, k.REMOVE_RAFT_VOTER_REQUEST,
              k.REMOVE_RAFT_VOTER_RESPONSE),
        _spec(ApiKey.UPDATE_RAFT_VOTER, k.UPDATE_RAFT_VOTER_REQUEST,
              k.UPDATE_RAFT_VOTER_RESPONSE),
        _spec(ApiKey.READ_INDEX, st.READ_INDEX_REQUEST, st.READ_INDEX_RESPONSE),
        _spec(ApiKey.LEASE_COUNTDOWN, st.LEASE_COUNTDOWN_REQUEST, st.LEASE_COUNTDOWN_RESPONSE),
    )
}
"""Every API we implement, by key."""


def supported_api_versions() -> list[Body]:
    """The ``api_keys`` list of an ApiVersions response: what this codec implements."""
    return [
        {"api_key": int(k), "min_version": s.min_version, "max_version": s.max_version}
        for k, s in sorted(API_SPECS.items())
    ]


def api_spec(api_key: int, api_version: int) -> ApiSpec | None:
    """The spec if we implement ``api_key`` at ``api_version``, else ``None``."""
    spec = API_SPECS.get(api_key)
    if spec is None or not spec.supports(api_version):
        return None
    return spec


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible request versions, 1 otherwise."""
    spec = _local_spec(api_key, api_version)
    return 2 if spec.request.codec(api_version).flexible else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible response versions, 0 otherwise; always 0 for ApiVersions."""
    spec = _local_spec(api_key, api_version)
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if spec.response.codec(api_version).flexible else 0


def _local_spec(api_key: int, api_version: int) -> ApiSpec:
    spec = api_spec(api_key, api_version)
    if spec is None:
        raise EncodeError(f"unsupported api key {api_key} version {api_version}")
    return spec


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A decoded request header (v1 or v2; v2's tagged fields carry nothing we use)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


_REQ_HEADERS = {v: m.REQUEST_HEADER.codec(v) for v in (1, 2)}
_RESP_HEADERS = {v: m.RESPONSE_HEADER.codec(v) for v in (0, 1)}


def _finish_frame(out: bytearray) -> bytes:
    size = len(out) - 4
    if size > 0x7FFFFFFF:
        raise EncodeError("message larger than a frame can hold")
    _SIZE.pack_into(out, 0, size)
    return bytes(out)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Body
) -> bytes:
    """A complete request frame (size prefix, header, body). Raises :class:`EncodeError`."""
    spec = _local_spec(api_key, api_version)
    codec = spec.request.codec(api_version)
    out = bytearray(4)
    _REQ_HEADERS[2 if codec.flexible else 1].write(
        out,
        {
            "request_api_key": api_key,
            "request_api_version": api_version,
            "correlation_id": correlation_id,
            "client_id": client_id,
        },
    )
    codec.write(out, body)
    return _finish_frame(out)


# Array elements one request may hold, over all its arrays. KRaft's requests name one topic and
# one partition, a few voters and endpoints; refusing more before building them keeps one
# frame of millions of tiny elements from blocking a node's loop for seconds.
MAX_REQUEST_ARRAY_ELEMENTS: Final = 4096


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Body]:
    """Decode a request payload (without its size prefix) into its header and body.

    Raises :class:`UnsupportedVersionError` (with the correlation id) for an API key or version
    we do not implement, and :class:`ProtocolError` for anything malformed.
    """
    r = Reader(frame, max_elements=MAX_REQUEST_ARRAY_ELEMENTS)
    if r.remaining < _REQUEST_PREFIX.size:
        raise ProtocolError("request shorter than its header")
    api_key, api_version, correlation_id = _REQUEST_PREFIX.unpack_from(r.buf, 0)
    spec = api_spec(api_key, api_version)
    if spec is None:
        raise UnsupportedVersionError(api_key, api_version, correlation_id)
    codec = spec.request.codec(api_version)
    fields = _REQ_HEADERS[2 if codec.flexible else 1].read(r)
    header = RequestHeader(api_key, api_version, correlation_id, fields["client_id"])
    body = codec.read(r)
    r.expect_end()
    return header, body


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Body) -> bytes:
    """A complete response frame (size prefix, header, body). Raises :class:`EncodeError`."""
    spec = _local_spec(api_key, api_version)
    out = bytearray(4)
    header = _RESP_HEADERS[response_header_version(api_key, api_version)]
    header.write(out, {"correlation_id": correlation_id})
    spec.response.codec(api_version).write(out, body)
    return _finish_frame(out)


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, Body]:
    """Decode a response payload to ``(correlation_id, body)``.

    The caller knows the API and version from the request it sent (Kafka responses do not
    repeat them). Raises :class:`ProtocolError`; asking for an API we do not implement is a
    local misuse and raises :class:`EncodeError`.
    """
    spec = _local_spec(api_key, api_version)
    r = Reader(frame)
    header = _RESP_HEADERS[response_header_version(api_key, api_version)].read(r)
    body = spec.response.codec(api_version).read(r)
    r.expect_end()
    return header["correlation_id"], body


def decode_request_body(api_key: int, api_version: int, data: bytes | memoryview) -> Body:
    """Decode just a request body (no header); for tests and tools."""
    return _local_spec(api_key, api_version).request.codec(api_version).decode(data)


def decode_response_body(api_key: int, api_version: int, data: bytes | memoryview) -> Body:
    """Decode just a response body (no header); for tests and tools."""
    return _local_spec(api_key, api_version).response.codec(api_version).decode(data)
