"""The C codec (kraft_spark/log/_fastcodec.c) against the pure-Python one in codec.py.

Both must write the same bytes for every batch, accept exactly the same record bytes with the same
result, and fail with Python exceptions (never a crash) on bad input.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kraft_spark.log import codec
from kraft_spark.log.codec import (
    CRC_START,
    HEADER_SIZE,
    PURE_PYTHON_ENV,
    decode_batch,
    encode_batch_buffer,
    read_header,
)
from kraft_spark.log.errors import CorruptRecordError
from kraft_spark.log.varint import encode_zigzag
from kraft_spark.raft.records import Batch, Record

fast: Any
try:
    from kraft_spark.log import _fastcodec as fast
except ImportError:  # reported by test_extension_is_built; the rest is skipped
    fast = None

needs_fast = pytest.mark.skipif(fast is None, reason="the C codec did not build")

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
maybe_bytes = st.none() | st.binary(max_size=40)
header_lists = st.lists(st.tuples(st.text(max_size=6), maybe_bytes), max_size=3).map(tuple)
# Mostly timestamps close together (the common case), sometimes anywhere in int64 (the deltas
# then overflow a varlong for some pairs: both encoders must refuse those).
timestamps = st.integers(0, 2**41) | INT64
records = st.builds(
    Record,
    key=maybe_bytes,
    value=maybe_bytes | st.binary(min_size=200, max_size=300),
    timestamp_ms=timestamps,
    headers=st.just(()) | header_lists,
)
batches = st.builds(
    Batch,
    base_offset=st.integers(0, 2**63 - 1 - 12),  # the decoder needs room for the offsets
    epoch=INT32,
    records=st.lists(records, min_size=1, max_size=12).map(tuple),
    is_control=st.booleans(),
    producer_id=INT64,
    producer_epoch=st.integers(-(2**15), 2**15 - 1),
    base_sequence=INT32,
)


def _py_encode(batch: Any) -> bytearray | type[Exception]:
    try:
        return codec._encode_batch_buffer_py(batch)
    except (ValueError, TypeError) as exc:
        return type(exc)


def _c_encode(batch: Any) -> bytearray | type[Exception]:
    try:
        buf: bytearray = fast.encode_batch(batch)
    except (ValueError, TypeError) as exc:
        return type(exc)
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[CRC_START:]))
    return buf


def _records_section(data: bytes) -> tuple[bytes, int, int, int, int]:
    header = read_header(data)
    return data, HEADER_SIZE, len(data), header.record_count, header.base_timestamp


def _decode_both(
    buf: bytes, pos: int, end: int, count: int, base_ts: int
) -> tuple[Any, Any, Any]:
    out = []
    for decode in (
        lambda: codec._decode_records_py(buf, pos, end, count, base_ts),
        lambda: fast.decode_records(buf, pos, end, count, base_ts, Record, CorruptRecordError,
                                    True),
        lambda: fast.decode_records(buf, pos, end, count, base_ts, Record, CorruptRecordError,
                                    False),
    ):
        try:
            out.append(decode())
        except CorruptRecordError:
            out.append(CorruptRecordError)
    return out[0], out[1], out[2]


def test_extension_is_built() -> None:
    """CI runs `pip install -e .` from a fresh clone: this proves the extension compiled."""
    assert fast is not None, "kraft_spark.log._fastcodec is missing: the C build failed"
    if os.environ.get(PURE_PYTHON_ENV, "") in ("", "0"):
        assert codec.FAST_CODEC
        assert codec._DIRECT_RECORDS, "Record no longer qualifies for direct construction"


def test_env_var_forces_pure_python() -> None:
    probe = "from kraft_spark.log import codec; print(codec.FAST_CODEC)"
    env = dict(os.environ, **{PURE_PYTHON_ENV: "1"})
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "False"


@needs_fast
@given(batches)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_c_and_python_encoders_agree(batch: Batch) -> None:
    expected = _py_encode(batch)
    got = _c_encode(batch)
    assert got == expected
    if isinstance(got, bytearray):
        data = bytes(got)
        decoded, end = decode_batch(data)
        assert decoded == batch and end == len(data)
        py, direct, called = _decode_both(*_records_section(data))
        assert py == direct == called == batch.records


@needs_fast
@given(batches, st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1,
                         max_size=4))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_c_and_python_decoders_agree_on_damaged_records(
    batch: Batch, edits: list[tuple[int, int]]
) -> None:
    """Byte edits in the record section: both decoders accept the same bytes with the same
    records, or both raise CorruptRecordError."""
    encoded = _c_encode(batch)
    assume(isinstance(encoded, bytearray))
    assert isinstance(encoded, bytearray)
    data = bytearray(encoded)
    section = len(data) - HEADER_SIZE
    for where, value in edits:
        data[HEADER_SIZE + where % section] = value
    buf, pos, end, count, base_ts = _records_section(bytes(data))
    py, direct, called = _decode_both(buf, pos, end, count, base_ts)
    assert py == direct == called


@needs_fast
@given(st.binary(max_size=120), st.integers(1, 20), INT64)
@settings(max_examples=400, deadline=None)
def test_c_and_python_decoders_agree_on_random_records(body: bytes, count: int,
                                                       base_ts: int) -> None:
    buf = b"\xff" * 3 + body + b"\x80" * 3  # bytes around the section must not be read
    py, direct, called = _decode_both(buf, 3, 3 + len(body), count, base_ts)
    assert py == direct == called


def _record(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return encode_zigzag(len(body)) + body


def _long_varint(n: int, width: int) -> bytes:
    """Zig-zag ``n`` padded to ``width`` bytes with continuation bits (non-canonical)."""
    u = (n << 1) ^ (n >> 63)
    out = []
    for i in range(width):
        byte = (u >> (7 * i)) & 0x7F
        out.append(byte | (0x80 if i < width - 1 else 0))
    return bytes(out)


@needs_fast
@pytest.mark.parametrize(
    "section",
    [
        # non-canonical but accepted by the Python decoder: long offset delta and value length
        _record(b"\x00", b"\x00", _long_varint(0, 3), b"\x01", b"\x02x", b"\x00"),
        _record(b"\x00", b"\x00", b"\x00", b"\x01", _long_varint(-1, 2), b"\x80\x00"),
        # a null key written as a two-byte -1 is rejected
        _record(b"\x00", b"\x00", b"\x00", _long_varint(-1, 2), b"\x01", b"\x00"),
        # 10-byte varints: the largest timestamp delta, one that overflows 64 bits, 11 bytes
        _record(b"\x00", _long_varint(2**63 - 1, 10), b"\x00", b"\x01", b"\x01", b"\x00"),
        _record(b"\x00", b"\xff" * 9 + b"\x02", b"\x00", b"\x01", b"\x01", b"\x00"),
        _record(b"\x00", b"\x80" * 10 + b"\x00", b"\x00", b"\x01", b"\x01", b"\x00"),
        # a huge header count, a header name that is not UTF-8, a header value past the end
        _record(b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", encode_zigzag(2**40)),
        _record(b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", b"\x02", b"\x04\xff\xfe", b"\x01"),
        _record(b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", b"\x02", b"\x02h", b"\x08ab"),
        # a record length that overflows, a negative one
        _long_varint(2**62, 10) + b"\x00" * 6,
        encode_zigzag(-3) + b"\x00" * 6,
    ],
)
@pytest.mark.parametrize("base_ts", [0, 2**63 - 1, -(2**63)])
def test_varint_edge_cases_agree(section: bytes, base_ts: int) -> None:
    py, direct, called = _decode_both(section + b"\x00", 0, len(section), 1, base_ts)
    assert py == direct == called


@needs_fast
def test_inputs_of_other_types() -> None:
    """Lists instead of tuples, bytearray and memoryview payloads: same bytes as Python."""
    rec = Record(bytearray(b"k"), memoryview(b"value"), 7, [["h", bytearray(b"v")]])  # type: ignore[arg-type]
    batch = Batch(5, 1, [rec, Record(None, None, 3)])  # type: ignore[arg-type]
    assert _c_encode(batch) == _py_encode(batch)


@dataclass(frozen=True)
class OtherRecord:
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


@needs_fast
def test_records_of_another_class_go_through_getattr() -> None:
    batch = Batch(0, 1, (OtherRecord(b"k", b"v", 3), Record(b"k", b"v", 4)))  # type: ignore[arg-type]
    assert _c_encode(batch) == _py_encode(batch)
    buf, pos, end, count, base_ts = _records_section(bytes(encode_batch_buffer(batch)))
    got = fast.decode_records(buf, pos, end, count, base_ts, OtherRecord, CorruptRecordError,
                              True)
    assert got == (OtherRecord(b"k", b"v", 3), OtherRecord(b"k", b"v", 4))


@needs_fast
@pytest.mark.parametrize(
    ("batch", "error"),
    [
        (Batch(0, 1, ()), ValueError),
        (Batch(0, 1, (Record("text", b"v"),)), TypeError),  # type: ignore[arg-type]
        (Batch(0, 1, (Record(None, 5),)), TypeError),  # type: ignore[arg-type]
        (Batch(0, 1, (Record(None, b"v", 0, ((b"name", b"v"),)),)), (TypeError, AttributeError)),  # type: ignore[arg-type]
        (Batch(0, 1, (Record(None, b"v", 0, (("a", b"v", b"x"),)),)), ValueError),  # type: ignore[arg-type]
        (Batch(0, 1, (Record(None, b"v", 0, (("\ud800", None),)),)), UnicodeEncodeError),
        (Batch(0, 1, (Record(None, b"v", 2**63),)), ValueError),
        (Batch(0, 1, (Record(None, b"v", 2**62), Record(None, b"v", -(2**62) - 1))), ValueError),
        (Batch(0, 1, (Record(None, b"v", 1.5),)), TypeError),  # type: ignore[arg-type]
        (Batch(-(2**63) - 1, 1, (Record(None, b"v"),)), ValueError),
        (Batch(0, 2**31, (Record(None, b"v"),)), ValueError),
        (Batch(0, 1, (Record(None, b"v"),), producer_epoch=2**15), ValueError),
        (Batch(0, 1, (Record(None, b"v"),), base_sequence="x"), ValueError),  # type: ignore[arg-type]
        (Batch(0, 1, (None,)), AttributeError),  # type: ignore[arg-type]
    ],
)
def test_bad_inputs_raise(batch: Batch, error: type[Exception] | tuple[type[Exception], ...]
                          ) -> None:
    with pytest.raises(error):
        fast.encode_batch(batch)
    with pytest.raises(error):
        codec._encode_batch_buffer_py(batch)


@needs_fast
def test_bad_decode_arguments_raise() -> None:
    data = bytes(encode_batch_buffer(Batch(0, 1, (Record(None, b"v"),))))
    args = _records_section(data)
    with pytest.raises(TypeError):
        fast.decode_records(bytearray(data), *args[1:], Record, CorruptRecordError, True)
    with pytest.raises(ValueError):
        fast.decode_records(data, 0, len(data) + 1, 1, 0, Record, CorruptRecordError, True)
    with pytest.raises(ValueError):
        fast.decode_records(data, 5, 4, 1, 0, Record, CorruptRecordError, True)
    with pytest.raises(TypeError):
        fast.decode_records(*args, Record, int, True)
    with pytest.raises(TypeError):
        fast.decode_records(*args)


@needs_fast
def test_no_reference_leaks() -> None:
    """Refcounts of the payload objects are unchanged after encodes, decodes and errors."""
    key, value, hvalue = b"key-" * 3, b"value" * 30, b"hv" * 5
    good = Batch(0, 1, (Record(key, value, 1, (("h", hvalue),)), Record(None, value, 2)))
    bad_headers: Any = ((1, b""),)  # a header name that is not a str
    bad = Batch(0, 1, (Record(key, value, 1), Record(None, value, 2, bad_headers)))
    data = bytes(encode_batch_buffer(good))
    args = _records_section(data)
    damaged = bytearray(data)
    damaged[-1] = 0x7F  # the last header value length now runs past the record
    before = [sys.getrefcount(o) for o in (key, value, hvalue, Record, good, bad)]
    for _ in range(200):
        fast.encode_batch(good)
        with pytest.raises(TypeError):
            fast.encode_batch(bad)
        fast.decode_records(*args, Record, CorruptRecordError, True)
        fast.decode_records(*args, Record, CorruptRecordError, False)
        with pytest.raises(CorruptRecordError):
            fast.decode_records(bytes(damaged), *args[1:], Record, CorruptRecordError, True)
    after = [sys.getrefcount(o) for o in (key, value, hvalue, Record, good, bad)]
    assert after == before


@needs_fast
def test_decoded_records_are_real_records() -> None:
    batch = Batch(0, 1, (Record(b"k", b"v", 5, (("h", None),)),))
    decoded, _ = decode_batch(bytes(encode_batch_buffer(batch)))
    rec = decoded.records[0]
    assert type(rec) is Record and rec == batch.records[0] and hash(rec) == hash(batch.records[0])
    with pytest.raises(AttributeError):
        rec.key = b"x"  # type: ignore[misc]
