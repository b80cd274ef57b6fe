"""Kafka v2 record batches (magic 2): the bytes of every segment and of every Fetch payload.

Layout (big-endian, Kafka's; docs/concepts/protocol.md, on-disk formats)::

    0  baseOffset int64          27 baseTimestamp int64
    8  batchLength int32         35 maxTimestamp int64
    12 partitionLeaderEpoch int32 43 producerId int64
    16 magic int8 = 2            51 producerEpoch int16
    17 crc uint32                53 baseSequence int32
    21 attributes int16          57 record count int32
    23 lastOffsetDelta int32     61 records ...

``batchLength`` counts the bytes after itself, so a batch occupies ``batchLength + 12`` bytes.
The CRC-32C covers attributes..end: the base offset and the leader epoch are outside it, which is
why a leader may place a batch at another offset in another epoch without re-hashing it.

Invariants kept by this module:

* ``decode_batch(encode_batch(b)) == b`` for every valid ``Batch``. Record timestamps are
  absolute in ``Record`` and stored as deltas from baseTimestamp = the first record's timestamp;
  maxTimestamp is the largest record timestamp.
* A batch is encoded once: ``encode_batch`` keeps the bytes on the batch, and a decoded batch
  keeps the bytes it was read from, so ``encode_batch(decode_batch(x)[0]) == x`` (a follower
  writes and a leader sends a batch byte for byte as it came, as Kafka does, even where ``x``
  spells a varint longer than needed).
* Every input either decodes or raises ``CorruptRecordError`` (``TruncatedBatchError`` when the
  bytes simply end too early); ``IndexError``, ``struct.error`` and ``UnicodeDecodeError`` never
  escape.
* Only what ``encode_batch`` writes is accepted: no compression, create-time timestamps, no
  transactional or delete-horizon bits, offset deltas 0..count-1, at least one record.

Speed: the per-record loops run in C (``_fastcodec.c``, built by ``pip install``) when the
extension is importable and ``KRAFT_SPARK_PURE_PYTHON_CODEC`` is not set to a non-empty value
other than ``0``; the C code produces and accepts exactly the same bytes as the Python code
below (tests/log/test_fastcodec.py). In the pure-Python path fixed fields go through
precompiled ``struct.Struct`` objects and small varints come from a table. Either way the CRC is
the compiled ``crc32c`` package (hardware CRC, faster than a portable C loop).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from types import ModuleType
from typing import NamedTuple

from crc32c import crc32c

from kraft_spark.log.errors import CorruptRecordError
from kraft_spark.log.varint import MINUS_ONE, TABLE_SIZE, ZIGZAG, decode_zigzag, encode_zigzag
from kraft_spark.raft.records import Batch, Header, Record

Buffer = bytes | bytearray | memoryview

MAGIC = 2
HEADER_SIZE = 61
"""Bytes before the first record."""
LOG_OVERHEAD = 12
"""baseOffset + batchLength: the bytes not counted by batchLength."""
CRC_START = 21
"""Offset of ``attributes``, where the CRC-covered part begins."""
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
CONTROL_FLAG = 0x20
"""Attributes bit 5: a control batch."""
_MIN_RECORD_BYTES = 7  # length, attributes, ts delta, offset delta, key len, value len, headers

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qiibI")  # baseOffset .. crc: the part outside the CRC
_CRC_PART = struct.Struct(">hiqqqhii")  # attributes .. record count
_BASE_AND_LENGTH = struct.Struct(">qi")
_CRC_FIELD = struct.Struct(">I")
_CRC_OFFSET = 17
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
assert _HEADER.size == HEADER_SIZE
assert _PREFIX.size == CRC_START

log = logging.getLogger(__name__)

PURE_PYTHON_ENV = "KRAFT_SPARK_PURE_PYTHON_CODEC"


def _load_fastcodec() -> ModuleType | None:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        log.debug("%s is set: record batches are encoded in pure Python", PURE_PYTHON_ENV)
        return None
    try:
        from kraft_spark.log import _fastcodec
    except ImportError as exc:
        log.warning("C record-batch codec unavailable (%s); using the pure-Python codec, "
                    "several times slower on large batches", exc)
        return None
    return _fastcodec


def _record_init_only_stores() -> bool:
    """True when ``Record(k, v, ts, h)`` does nothing but store its four arguments: a dataclass
    with exactly these fields, the generated ``__init__`` (or the one ``Record`` declares does
    only that: ``INIT_ONLY_STORES``) and no ``__post_init__``. The C decoder
    then fills the slots of fresh objects directly (~7x faster than calling ``Record``);
    any change to ``Record`` that breaks this falls back to calling it."""
    fields = getattr(Record, "__dataclass_fields__", None)
    init = Record.__dict__.get("__init__")
    code = getattr(init, "__code__", None)
    return (
        fields is not None
        and list(fields) == ["key", "value", "timestamp_ms", "headers"]
        and not hasattr(Record, "__post_init__")
        and code is not None
        and (code.co_filename == "<string>"  # made by dataclasses, not written in the class
             or getattr(init, "INIT_ONLY_STORES", False))
        and code.co_varnames[:5] == ("self", "key", "value", "timestamp_ms", "headers")
    )


_fast = _load_fastcodec()
FAST_CODEC = _fast is not None
"""Whether the C codec is in use (tests assert it is, so CI proves the extension compiled)."""
_DIRECT_RECORDS = _record_init_only_stores()


class TruncatedBatchError(CorruptRecordError):
    """The buffer ends before the batch does (a torn write, or a partial Fetch payload)."""


class BatchHeader(NamedTuple):
    """The fixed 61 bytes of a batch, as read; ``size`` is the whole batch in bytes."""

    base_offset: int
    batch_length: int
    epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)


# ---------------------------------------------------------------------------------------------
# encoding


def _encode_headers(headers: tuple[Header, ...]) -> bytes:
    parts = [_zz(len(headers))]
    for name, value in headers:
        raw = name.encode("utf-8")
        parts.append(_zz(len(raw)))
        parts.append(raw)
        if value is None:
            parts.append(MINUS_ONE)
        else:
            parts.append(_zz(len(value)))
            parts.append(value)
    return b"".join(parts)


def _zz(n: int) -> bytes:
    return ZIGZAG[n] if 0 <= n < TABLE_SIZE else encode_zigzag(n)


_FAST = 4096
# Pieces that always travel together, joined ahead of time for the common record shapes:
# attributes byte + timestamp delta, and offset delta + the null-key marker.
_ATTR_TS = [b"\x00" + ZIGZAG[n] for n in range(_FAST)]
_OFFSET_NULL_KEY = [ZIGZAG[n] + MINUS_ONE for n in range(_FAST)]


def _record_parts(records: tuple[Record, ...], base_ts: int, parts: list[bytes]) -> int:
    """Append the encoded records to ``parts``; return the largest timestamp.

    Hot loop: one pass, table lookups instead of varint loops, and no per-record bytes object
    built (the pieces are joined once by the caller). Records without headers and with small
    deltas take the fast branches; anything else goes through ``_general_record``.
    """
    table = ZIGZAG
    size = TABLE_SIZE
    fast = _FAST
    attr_ts = _ATTR_TS
    offset_null_key = _OFFSET_NULL_KEY
    zero = b"\x00"
    extend = parts.extend
    max_ts = base_ts
    for i, r in enumerate(records):
        ts = r.timestamp_ms
        if ts > max_ts:  # noqa: PLR1730 - max() is a function call per record
            max_ts = ts
        td = ts - base_ts
        value = r.value
        if (0 <= td < fast and i < fast and value is not None and not r.headers
                and (vlen := len(value)) < size):
            a = attr_ts[td]
            vp = table[vlen]
            key = r.key
            if key is None:
                b = offset_null_key[i]
                blen = len(a) + len(b) + len(vp) + vlen + 1
                extend((table[blen] if blen < size else encode_zigzag(blen), a, b, vp, value,
                        zero))
                continue
            klen = len(key)
            if klen < size:
                b = table[i]
                kp = table[klen]
                blen = len(a) + len(b) + len(kp) + klen + len(vp) + vlen + 1
                extend((table[blen] if blen < size else encode_zigzag(blen), a, b, kp, key, vp,
                        value, zero))
                continue
        _general_record(parts, i, r, td)
    return max_ts


def _general_record(parts: list[bytes], i: int, r: Record, td: int) -> None:
    key = r.key
    kp = MINUS_ONE if key is None else _zz(len(key)) + key
    value = r.value
    vp = MINUS_ONE if value is None else _zz(len(value)) + value
    body = b"".join((b"\x00", _zz(td), _zz(i), kp, vp, _encode_headers(r.headers)))
    parts.append(_zz(len(body)))
    parts.append(body)


def encode_batch_buffer(batch: Batch) -> bytearray:
    """Encode ``batch``; returns a fresh ``bytearray`` (one copy of the payload, no more).

    Raises ``ValueError`` for an empty batch or a field that does not fit its Kafka type, and
    ``TypeError`` for a key, value or header of the wrong type.
    """
    if _fast is None:
        return _encode_batch_buffer_py(batch)
    buf: bytearray = _fast.encode_batch(batch)
    _CRC_FIELD.pack_into(buf, _CRC_OFFSET, crc32c(memoryview(buf)[CRC_START:]))
    return buf


def _encode_batch_buffer_py(batch: Batch) -> bytearray:
    records = batch.records
    count = len(records)
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    base_ts = records[0].timestamp_ms
    parts: list[bytes] = [bytes(HEADER_SIZE)]
    max_ts = _record_parts(records, base_ts, parts)
    buf = bytearray().join(parts)
    attributes = CONTROL_FLAG if batch.is_control else 0
    try:
        _CRC_PART.pack_into(
            buf, CRC_START, attributes, count - 1, base_ts, max_ts, batch.producer_id,
            batch.producer_epoch, batch.base_sequence, count,
        )
        crc = crc32c(memoryview(buf)[CRC_START:])
        _PREFIX.pack_into(buf, 0, batch.base_offset, len(buf) - LOG_OVERHEAD, batch.epoch, MAGIC,
                          crc)
    except struct.error as exc:
        raise ValueError(f"batch at offset {batch.base_offset} has a field out of range: {exc}")\
            from exc
    return buf


def encode_batch(batch: Batch) -> bytes:
    """The Kafka v2 bytes of ``batch``, made once: they are kept on the batch (``Batch._wire``),
    and bytes it was decoded from are used as they are."""
    wire = batch._wire
    if wire is None:
        wire = bytes(encode_batch_buffer(batch))
        object.__setattr__(batch, "_wire", wire)
    return wire


# ---------------------------------------------------------------------------------------------
# decoding


def read_header(
    buf: Buffer, pos: int = 0, limit: int | None = None, *, whole: bool = True
) -> BatchHeader:
    """Parse and sanity-check the header at ``pos`` (no CRC check, records not read).

    Checks the magic, the length, the attribute bits, the record count and, if ``whole``, that
    the whole batch lies within ``limit`` (default ``len(buf)``); with ``whole=False`` only the
    61 header bytes must be there (a header walk). Raises ``TruncatedBatchError`` when the
    buffer ends first, ``CorruptRecordError`` otherwise.
    """
    end = len(buf) if limit is None else min(limit, len(buf))
    available = end - pos
    if available < LOG_OVERHEAD:
        raise TruncatedBatchError(f"{available} bytes left, less than a batch's 12-byte prefix")
    base_offset, batch_length = _BASE_AND_LENGTH.unpack_from(buf, pos)
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batchLength {batch_length} is below the minimum of 49")
    if available < HEADER_SIZE:
        raise TruncatedBatchError(f"{available} bytes left, less than a batch header (61)")
    header = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptRecordError(f"magic {header.magic}, expected {MAGIC}")
    if header.attributes & ~CONTROL_FLAG:
        raise CorruptRecordError(
            f"unsupported attributes 0x{header.attributes & 0xFFFF:04x} (only the control bit "
            "is allowed: no compression, create time, not transactional)"
        )
    count = header.record_count
    if count < 1 or header.last_offset_delta != count - 1:
        raise CorruptRecordError(
            f"record count {count} does not match lastOffsetDelta {header.last_offset_delta}"
        )
    if count > (batch_length - MIN_BATCH_LENGTH) // _MIN_RECORD_BYTES:
        raise CorruptRecordError(f"record count {count} cannot fit in {batch_length} bytes")
    if base_offset < 0 or base_offset > _INT64_MAX - count:
        raise CorruptRecordError(f"base offset {base_offset} out of range")
    if whole and batch_length + LOG_OVERHEAD > available:
        raise TruncatedBatchError(
            f"batch of {batch_length + LOG_OVERHEAD} bytes but only {available} bytes left"
        )
    return header


def check_crc(buf: Buffer, pos: int, header: BatchHeader) -> None:
    """Raise ``CorruptRecordError`` unless the stored CRC-32C matches the bytes."""
    actual = crc32c(memoryview(buf)[pos + CRC_START : pos + header.size])
    if actual != header.crc:
        raise CorruptRecordError(f"CRC mismatch: stored {header.crc}, computed {actual}")


def validate_batch(buf: Buffer, pos: int = 0, limit: int | None = None) -> BatchHeader:
    """Header checks plus the CRC: what recovery verifies for every batch of a tail."""
    header = read_header(buf, pos, limit)
    check_crc(buf, pos, header)
    return header


def decode_batch(buf: Buffer, pos: int = 0, limit: int | None = None) -> tuple[Batch, int]:
    """Decode the batch at ``pos``; returns it and the position just after it.

    Verifies length, magic, CRC and every record (lengths, offset deltas, UTF-8 header names).
    """
    if not isinstance(buf, bytes):
        buf = bytes(buf)
    header = read_header(buf, pos, limit)
    check_crc(buf, pos, header)
    end = pos + header.size
    records = _decode_records(buf, pos + HEADER_SIZE, end, header.record_count,
                              header.base_timestamp)
    batch = Batch(
        base_offset=header.base_offset,
        epoch=header.epoch,
        records=records,
        is_control=header.is_control,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        _wire=buf[pos:end] if pos or end != len(buf) else buf,
    )
    return batch, end


def decode_batches(buf: Buffer) -> list[Batch]:
    """Decode a buffer made of whole batches only (e.g. one segment, one Fetch payload)."""
    return list(iter_batches(buf))


def iter_batches(buf: Buffer, pos: int = 0, limit: int | None = None) -> Iterator[Batch]:
    """Yield the batches of ``buf[pos:limit]``; it must hold whole, valid batches only."""
    if not isinstance(buf, bytes):
        buf = bytes(buf)
    end = len(buf) if limit is None else limit
    while pos < end:
        batch, pos = decode_batch(buf, pos, end)
        yield batch


def _decode_records(
    buf: bytes, pos: int, end: int, count: int, base_ts: int
) -> tuple[Record, ...]:
    if _fast is not None:
        records: tuple[Record, ...] = _fast.decode_records(
            buf, pos, end, count, base_ts, Record, CorruptRecordError, _DIRECT_RECORDS
        )
        return records
    return _decode_records_py(buf, pos, end, count, base_ts)


def _decode_records_py(
    buf: bytes, pos: int, end: int, count: int, base_ts: int
) -> tuple[Record, ...]:
    try:
        records = _decode_records_unchecked(buf, pos, end, count, base_ts)
    except (IndexError, UnicodeDecodeError) as exc:  # safety net; explicit checks come first
        raise CorruptRecordError(f"malformed record: {exc}") from exc
    return records


def _decode_records_unchecked(
    buf: bytes, pos: int, end: int, count: int, base_ts: int
) -> tuple[Record, ...]:
    """The per-record loop.

    Varints have inline one- and two-byte paths (a function call per varint would double the
    cost); the offset delta, whose value is known in advance, is matched against its canonical
    encoding. Every length is checked against its record's end before it is used, and every
    record must end exactly where its length says.
    """
    table = ZIGZAG
    size = TABLE_SIZE
    out: list[Record] = []
    append = out.append
    for i in range(count):
        if pos >= end:
            raise CorruptRecordError(f"record {i} starts past the end of the batch")
        b = buf[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif buf[pos + 1] < 0x80:
            u = (b & 0x7F) | (buf[pos + 1] << 7)
            length = (u >> 1) ^ -(u & 1)
            pos += 2
        else:
            length, pos = decode_zigzag(buf, pos, end)
        rec_end = pos + length
        if length < _MIN_RECORD_BYTES - 1 or rec_end > end:
            raise CorruptRecordError(f"record {i} has an invalid length {length}")
        pos += 1  # record attributes: unused by v2, always written as 0
        b = buf[pos]
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        elif buf[pos + 1] < 0x80:
            u = (b & 0x7F) | (buf[pos + 1] << 7)
            ts_delta = (u >> 1) ^ -(u & 1)
            pos += 2
        else:
            ts_delta, pos = decode_zigzag(buf, pos, rec_end)
        if i < size and buf.startswith(table[i], pos):
            pos += len(table[i])
        else:
            offset_delta, pos = decode_zigzag(buf, pos, rec_end)
            if offset_delta != i:
                raise CorruptRecordError(f"record {i} has offset delta {offset_delta}")
        b = buf[pos]
        if b == 1:
            key = None
            pos += 1
        else:
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = decode_zigzag(buf, pos, rec_end)
            if klen < 0 or pos + klen > rec_end:
                raise CorruptRecordError(f"record {i} has key length {klen}")
            key = buf[pos : pos + klen]
            pos += klen
        b = buf[pos]
        if b < 0x80:
            vlen = (b >> 1) ^ -(b & 1)
            pos += 1
        elif buf[pos + 1] < 0x80:
            u = (b & 0x7F) | (buf[pos + 1] << 7)
            vlen = (u >> 1) ^ -(u & 1)
            pos += 2
        else:
            vlen, pos = decode_zigzag(buf, pos, rec_end)
        if vlen < 0:
            if vlen != -1:
                raise CorruptRecordError(f"record {i} has value length {vlen}")
            value = None
        else:
            if pos + vlen > rec_end:
                raise CorruptRecordError(f"record {i}: value runs past the record")
            value = buf[pos : pos + vlen]
            pos += vlen
        if pos >= rec_end:
            raise CorruptRecordError(f"record {i}: header count missing")
        if buf[pos] == 0:
            headers: tuple[Header, ...] = ()
            pos += 1
        else:
            headers, pos = _decode_headers(buf, pos, rec_end, i)
        if pos != rec_end:
            raise CorruptRecordError(f"record {i}: {rec_end - pos} bytes left over")
        ts = base_ts + ts_delta
        if not _INT64_MIN <= ts <= _INT64_MAX:
            raise CorruptRecordError(f"record {i}: timestamp out of range")
        append(Record(key, value, ts, headers))
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes after the last record of the batch")
    return tuple(out)


def _decode_headers(buf: bytes, pos: int, rec_end: int, i: int) -> tuple[tuple[Header, ...], int]:
    count, pos = decode_zigzag(buf, pos, rec_end)
    if count < 0 or count > rec_end - pos:
        raise CorruptRecordError(f"record {i} has header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        nlen, pos = decode_zigzag(buf, pos, rec_end)
        if nlen < 0 or pos + nlen > rec_end:
            raise CorruptRecordError(f"record {i}: header name length {nlen}")
        name = buf[pos : pos + nlen].decode("utf-8")
        pos += nlen
        vlen, pos = decode_zigzag(buf, pos, rec_end)
        if vlen < -1 or pos + vlen > rec_end:
            raise CorruptRecordError(f"record {i}: header value length {vlen}")
        if vlen == -1:
            headers.append((name, None))
        else:
            headers.append((name, buf[pos : pos + vlen]))
            pos += vlen
    return tuple(headers), pos
