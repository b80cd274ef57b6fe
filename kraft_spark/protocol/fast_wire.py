"""Hand-written codecs for the two messages on every commit's critical path: Fetch v12 requests
(follower → leader) and responses (leader → follower).

Each commit crosses them twice (the leader's answer carrying the new batch, the follower's next
Fetch acknowledging it), and the generic schema codec (``kraft_spark.protocol.codec``) plus the
dict ↔ dataclass mapping of ``kraft_spark.protocol.wire`` cost 25-40 µs per message on a loaded
2-core machine, more than the fsync. These functions go straight between the core's dataclasses
and frames with a few precompiled ``struct`` calls.

Contract (held by ``tests/protocol/test_fast_wire.py`` against the generic path, on generated
messages and on mutated bytes):

* ``encode_*`` produce exactly the bytes of the generic path (``request_to_wire`` /
  ``response_to_wire`` + ``encode_request`` / ``encode_response``).
* ``decode_*`` accept only the canonical layout of one topic and one partition, as this project
  and Kafka write it; they return the same message the generic path would, or ``None`` for
  anything else (another topic or version, unknown or unordered tags, a rack id, bad UTF-8,
  trailing bytes, an unknown error code...), and the caller then runs the generic path, which
  either accepts it too or produces the usual error. So the fast path changes speed, never
  behaviour.
"""

from __future__ import annotations

import struct
import uuid

from kraft_spark.protocol import METADATA_TOPIC, ApiKey, RequestHeader, decode_response
from kraft_spark.protocol.primitives import write_uvarint
from kraft_spark.protocol.wire import decode_record_set, encode_batches, response_from_wire
from kraft_spark.protocol.wire_elections import split_error
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.messages import ErrorCode, FetchRequest, FetchResponse, Response
from kraft_spark.raft.voter_set import NIL_DIRECTORY

FETCH_VERSION = 12

_TOPIC = METADATA_TOPIC.encode()
# Compact array of one topic, its compact name, compact array of one partition.
_ONE_TOPIC = bytes([2, len(_TOPIC) + 1]) + _TOPIC + b"\x02"

# ---- request: size, api key, version, correlation id | client id (int16-prefixed)
_REQ_HEAD = struct.Struct(">ihhi")
_REQ_PREFIX = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
# ReplicaId, MaxWaitMs, MinBytes, MaxBytes, IsolationLevel, SessionId, SessionEpoch
_REQ_FIXED = struct.Struct(">iiiibii")
# Partition, CurrentLeaderEpoch, FetchOffset, LastFetchedEpoch, LogStartOffset, PartitionMaxBytes
_REQ_PART = struct.Struct(">iiqiqi")
# partition tags, topic tags, empty ForgottenTopicsData, empty RackId
_REQ_AFTER_PART = b"\x00\x00\x01\x01"
_CATCHING_UP_TAG = b"\x90\x4e\x01\x01"  # tag 10000, size 1, true
_DIRECTORY_TAG = b"\x91\x4e\x10"  # tag 10001 (KraftSparkReplicaDirectoryId), size 16

# ---- response: size, correlation id, header tags | ThrottleTimeMs, ErrorCode, SessionId
_RESP_HEAD = struct.Struct(">iib")
_RESP_FIXED = struct.Struct(">ihi")
# PartitionIndex, ErrorCode, HighWatermark, LastStableOffset, LogStartOffset
_RESP_PART = struct.Struct(">ihqqq")
# empty AbortedTransactions, PreferredReadReplica -1
_RESP_AFTER_PART = b"\x01\xff\xff\xff\xff"
_DIVERGING = struct.Struct(">iqb")  # Epoch, EndOffset, tags
_LEADER = struct.Struct(">iib")  # LeaderId, LeaderEpoch, tags
_TAG_DIVERGING = b"\x00\x0d"  # tag 0, 13 bytes
_TAG_LEADER = b"\x01\x09"  # tag 1, 9 bytes


def _uvarint(value: int) -> bytes:
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """``(value, next position)``; ``(-1, pos)`` for a truncated or over-long varint."""
    value = shift = 0
    end = len(buf)
    while pos < end and shift <= 28:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    return -1, pos


# --------------------------------------------------------------------------- Fetch request


def encode_fetch_request(msg: FetchRequest, correlation_id: int, client_id: str) -> bytes:
    """The whole frame of ``msg`` as Fetch v12 (what ``encode_request`` makes of
    ``request_to_wire(msg)``)."""
    client = client_id.encode()
    cluster = msg.cluster_id.encode()
    cluster_field = _uvarint(len(cluster) + 1) + cluster
    tags = b"\x00" + _uvarint(len(cluster_field)) + cluster_field
    count = 1
    if msg.catching_up:
        tags += _CATCHING_UP_TAG
        count += 1
    if msg.directory_id != NIL_DIRECTORY:
        tags += _DIRECTORY_TAG + msg.directory_id.bytes
        count += 1
    body = b"".join((
        _REQ_FIXED.pack(msg.replica_id, msg.max_wait_ms, 0, msg.max_bytes, 0, 0, -1),
        _ONE_TOPIC,
        _REQ_PART.pack(0, msg.current_leader_epoch, msg.fetch_offset, msg.last_fetched_epoch,
                       -1, msg.max_bytes),
        _REQ_AFTER_PART,
        bytes((count,)),
        tags,
    ))
    size = _REQ_PREFIX.size + 2 + len(client) + 1 + len(body)
    return b"".join((
        _REQ_HEAD.pack(size, ApiKey.FETCH, FETCH_VERSION, correlation_id),
        _INT16.pack(len(client)),
        client,
        b"\x00",
        body,
    ))


def decode_fetch_request(
    payload: bytes, local_cluster_id: str
) -> tuple[RequestHeader, FetchRequest] | None:
    """The header and core request of a Fetch v12 payload (size prefix removed), or None when
    it is not in the canonical layout (the generic path decides)."""
    if len(payload) < _REQ_PREFIX.size + 3:
        return None
    api_key, version, correlation_id = _REQ_PREFIX.unpack_from(payload, 0)
    if api_key != ApiKey.FETCH or version != FETCH_VERSION:
        return None
    pos = _REQ_PREFIX.size
    (client_len,) = _INT16.unpack_from(payload, pos)
    pos += 2
    client_id: str | None = None
    if client_len >= 0:
        end = pos + client_len
        if end > len(payload):
            return None
        try:
            client_id = payload[pos:end].decode()
        except UnicodeDecodeError:
            return None
        pos = end
    elif client_len != -1:
        return None
    fixed_at = pos + 1  # after the header's (empty) tagged fields
    part_at = fixed_at + _REQ_FIXED.size + len(_ONE_TOPIC)
    tags_at = part_at + _REQ_PART.size + len(_REQ_AFTER_PART)
    if (
        len(payload) <= tags_at
        or payload[pos] != 0
        or payload[part_at - len(_ONE_TOPIC):part_at] != _ONE_TOPIC
        or payload[tags_at - len(_REQ_AFTER_PART):tags_at] != _REQ_AFTER_PART
    ):
        return None
    replica_id, max_wait_ms, _min, max_bytes, _iso, _sid, _sepoch = _REQ_FIXED.unpack_from(
        payload, fixed_at
    )
    partition, leader_epoch, fetch_offset, last_epoch, _lso, part_max = _REQ_PART.unpack_from(
        payload, part_at
    )
    if partition != 0 or fetch_offset < 0:
        return None
    cluster_id: str | None = None
    catching_up = False
    directory_id = NIL_DIRECTORY
    count = payload[tags_at]
    if count >= 0x80:
        return None
    pos = tags_at + 1
    last_tag = -1
    for _ in range(count):
        tag, pos = _read_uvarint(payload, pos)
        size, pos = _read_uvarint(payload, pos)
        if tag <= last_tag or size < 0 or pos + size > len(payload):
            return None
        last_tag = tag
        if tag == 0:
            length, start = _read_uvarint(payload, pos)
            if length <= 0 or start + length - 1 != pos + size:
                return None
            try:
                cluster_id = payload[start:pos + size].decode()
            except UnicodeDecodeError:
                return None
        elif tag == 10000:
            if size != 1 or payload[pos] > 1:
                return None
            catching_up = payload[pos] == 1
        elif tag == 10001:
            if size != 16:
                return None
            directory_id = uuid.UUID(bytes=bytes(payload[pos:pos + 16]))
        else:
            return None
        pos += size
    if pos != len(payload):
        return None
    header = RequestHeader(ApiKey.FETCH, FETCH_VERSION, correlation_id, client_id)
    return header, FetchRequest(
        cluster_id=local_cluster_id if cluster_id is None else cluster_id,
        replica_id=replica_id,
        current_leader_epoch=leader_epoch,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_epoch,
        max_wait_ms=max(0, max_wait_ms),
        max_bytes=max(1, min(max_bytes, part_max)),
        catching_up=catching_up,
        directory_id=directory_id,
    )


# --------------------------------------------------------------------------- Fetch response


def encode_fetch_response(msg: FetchResponse, correlation_id: int) -> bytes:
    """The whole frame of ``msg`` as a Fetch v12 response (what ``encode_response`` makes of
    ``response_to_wire(msg)``)."""
    top, err = split_error(msg.error)
    if msg.batches:
        data = encode_batches(msg.batches)
        records = _uvarint(len(data) + 1) + data
    else:
        records = b"\x00"
    tags: list[bytes] = []
    div = msg.diverging_epoch
    if div is not None and (div.epoch != -1 or div.offset != -1):
        tags.append(_TAG_DIVERGING + _DIVERGING.pack(div.epoch, div.offset, 0))
    if msg.leader_id != -1 or msg.leader_epoch != -1:
        tags.append(_TAG_LEADER + _LEADER.pack(msg.leader_id, msg.leader_epoch, 0))
    body = b"".join((
        _RESP_FIXED.pack(0, top, 0),
        _ONE_TOPIC,
        _RESP_PART.pack(0, err, msg.high_watermark, -1, -1),
        _RESP_AFTER_PART,
        records,
        bytes((len(tags),)),
        *tags,
        b"\x00\x00",  # topic tags, top-level tags
    ))
    return _RESP_HEAD.pack(len(body) + 5, correlation_id, 0) + body


def decode_fetch_response(payload: bytes) -> FetchResponse | None:
    """The core response of a Fetch v12 response payload (size prefix and correlation id
    included), or None when it is not in the canonical layout (the generic path decides).
    Raises ``WireError`` (CORRUPT_MESSAGE) for a bad record batch, as the generic path does."""
    part_at = 5 + _RESP_FIXED.size + len(_ONE_TOPIC)
    records_at = part_at + _RESP_PART.size + len(_RESP_AFTER_PART)
    if (
        len(payload) <= records_at
        or payload[4] != 0
        or payload[part_at - len(_ONE_TOPIC):part_at] != _ONE_TOPIC
        or payload[records_at - len(_RESP_AFTER_PART):records_at] != _RESP_AFTER_PART
    ):
        return None
    _throttle, top, _session = _RESP_FIXED.unpack_from(payload, 5)
    index, err, high_watermark, _lso, _start = _RESP_PART.unpack_from(payload, part_at)
    if index != 0:
        return None
    try:
        error = ErrorCode(top) if top else ErrorCode(err)
    except ValueError:
        return None
    length, pos = _read_uvarint(payload, records_at)
    if length < 0:
        return None
    data = b""
    if length > 0:
        end = pos + length - 1
        if end > len(payload):
            return None
        data = payload[pos:end]
        pos = end
    if pos + 3 > len(payload):
        return None
    count = payload[pos]
    pos += 1
    diverging: OffsetAndEpoch | None = None
    leader_id = leader_epoch = -1
    last_tag = -1
    for _ in range(count if count <= 2 else 0):
        if pos >= len(payload):
            return None
        tag = payload[pos]
        if tag <= last_tag:
            return None
        last_tag = tag
        if tag == 0 and payload[pos:pos + 2] == _TAG_DIVERGING and pos + 15 <= len(payload):
            epoch, offset, inner = _DIVERGING.unpack_from(payload, pos + 2)
            if inner != 0:
                return None
            if epoch >= 0:
                diverging = OffsetAndEpoch(offset, epoch)
            pos += 15
        elif tag == 1 and payload[pos:pos + 2] == _TAG_LEADER and pos + 11 <= len(payload):
            leader_id, leader_epoch, inner = _LEADER.unpack_from(payload, pos + 2)
            if inner != 0:
                return None
            pos += 11
        else:
            return None
    if count > 2 or payload[pos:] != b"\x00\x00":
        return None
    return FetchResponse(
        error=error,
        leader_id=leader_id,
        leader_epoch=leader_epoch,
        high_watermark=high_watermark,
        diverging_epoch=diverging,
        batches=tuple(decode_record_set(data)),
        log_start_offset=_start,
    )


def decode_fetch_reply(payload: bytes) -> Response:
    """A Fetch response body as the core's message: this module's decoder for the shape the
    leaders send, else the generic schema-driven one (any other shape a Kafka leader may send)."""
    fast = decode_fetch_response(payload)
    if fast is not None:
        return fast
    fetch = int(ApiKey.FETCH)
    return response_from_wire(fetch, decode_response(fetch, FETCH_VERSION, payload)[1])


__all__ = [
    "FETCH_VERSION",
    "decode_fetch_reply",
    "decode_fetch_request",
    "decode_fetch_response",
    "encode_fetch_request",
    "encode_fetch_response",
]
