"""Primitive readers and writers: known encodings, round trips, and clean failures."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_spark.protocol import primitives as p
from kraft_spark.protocol.exceptions import EncodeError, ProtocolError
from kraft_spark.protocol.primitives import Reader

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)


def _encode(write: Callable[[bytearray, Any], None], value: Any) -> bytes:
    out = bytearray()
    write(out, value)
    return bytes(out)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16384, "808001"),
        (2**32 - 1, "ffffffff0f"),
    ],
)
def test_uvarint_known(value: int, encoded: str) -> None:
    assert _encode(p.write_uvarint, value).hex() == encoded
    r = Reader(bytes.fromhex(encoded))
    assert r.uvarint() == value
    r.expect_end()


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (-64, "7f"), (64, "8001")],
)
def test_varint_zigzag_known(value: int, encoded: str) -> None:
    assert _encode(p.write_varint, value).hex() == encoded
    assert _encode(p.write_varlong, value).hex() == encoded
    assert Reader(bytes.fromhex(encoded)).varint() == value
    assert Reader(bytes.fromhex(encoded)).varlong() == value


def test_varint_extremes() -> None:
    assert _encode(p.write_varint, -(2**31)).hex() == "ffffffff0f"
    assert _encode(p.write_varlong, -(2**63)).hex() == "ffffffffffffffffff01"
    assert Reader(bytes.fromhex("ffffffffffffffffff01")).varlong() == -(2**63)
    with pytest.raises(EncodeError):
        _encode(p.write_varint, 2**31)
    with pytest.raises(EncodeError):
        _encode(p.write_uvarint, -1)
    with pytest.raises(EncodeError):
        _encode(p.write_uvarint, 2**32)


def test_overlong_varints_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex("8080808080")).uvarint()  # continuation on the 5th byte
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex("ffffffff1f")).uvarint()  # > 2**32 - 1
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex("80" * 10 + "01")).uvarlong()
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex("8080")).uvarint()  # truncated


@given(st.integers(0, 2**32 - 1))
def test_uvarint_round_trip(v: int) -> None:
    assert Reader(_encode(p.write_uvarint, v)).uvarint() == v


@given(st.integers(0, 2**64 - 1))
def test_uvarlong_round_trip(v: int) -> None:
    assert Reader(_encode(p.write_uvarlong, v)).uvarlong() == v


@given(I32)
def test_varint_round_trip(v: int) -> None:
    assert Reader(_encode(p.write_varint, v)).varint() == v


@given(I64)
def test_varlong_round_trip(v: int) -> None:
    assert Reader(_encode(p.write_varlong, v)).varlong() == v


def test_fixed_width_big_endian() -> None:
    assert _encode(p.write_int16, -2).hex() == "fffe"
    assert _encode(p.write_int32, 0x01020304).hex() == "01020304"
    assert _encode(p.write_int64, -1).hex() == "ff" * 8
    assert _encode(p.write_uint32, 2**32 - 1).hex() == "ffffffff"
    assert _encode(p.write_bool, True).hex() == "01"
    r = Reader(bytes.fromhex("fffe0102030402"))
    assert (r.int16(), r.int32(), r.boolean()) == (-2, 0x01020304, True)
    with pytest.raises(EncodeError):
        _encode(p.write_int16, 2**15)
    with pytest.raises(EncodeError):
        _encode(p.write_uint16, -1)


def test_strings_and_bytes() -> None:
    assert _encode(p.write_nullable_string, None).hex() == "ffff"
    assert _encode(p.write_string, "ab").hex() == "00026162"
    assert _encode(p.write_compact_string, "ab").hex() == "036162"
    assert _encode(p.write_compact_nullable_string, None).hex() == "00"
    assert _encode(p.write_nullable_bytes, None).hex() == "ffffffff"
    assert _encode(p.write_bytes, b"\x01").hex() == "0000000101"
    assert _encode(p.write_compact_bytes, b"").hex() == "01"
    assert Reader(bytes.fromhex("ffff")).nullable_string() is None
    assert Reader(bytes.fromhex("00")).compact_nullable_bytes() is None
    assert Reader(bytes.fromhex("036162")).compact_string() == "ab"
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex("ffff")).string()  # null where not nullable
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex("fffe")).nullable_string()  # negative length
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex("0002ff")).string()  # truncated
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex("0002c328")).string()  # invalid UTF-8
    with pytest.raises(EncodeError):
        _encode(p.write_string, "x" * 40000)
    with pytest.raises(EncodeError):
        _encode(p.write_string, "\ud800")  # lone surrogate
    with pytest.raises(EncodeError):
        _encode(p.write_bytes, "not bytes")


def test_uuid_round_trip() -> None:
    u = uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")
    assert _encode(p.write_uuid, u).hex() == "0123456789abcdef0123456789abcdef"
    assert Reader(u.bytes).uuid() == u


def test_array_length_guards_against_huge_counts() -> None:
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex("7fffffff00")).array_length(compact=False, min_element_size=4)
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex("fffffffe")).array_length(compact=False)
    assert Reader(bytes.fromhex("ffffffff")).array_length(compact=False) == -1
    assert Reader(bytes.fromhex("00")).array_length(compact=True) == -1


def test_skip_tagged_fields() -> None:
    r = Reader(bytes.fromhex("02" + "05" + "02" + "aaaa" + "07" + "00" + "99"))
    r.skip_tagged_fields()
    assert r.remaining == 1
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex("01" + "05" + "09" + "aa")).skip_tagged_fields()


def test_reader_window_is_respected() -> None:
    r = Reader(b"\x00\x01\x02\x03\x04", 1, 3)
    assert r.int16() == 0x0102
    with pytest.raises(ProtocolError):
        r.int8()


_READS: list[Callable[[Reader], object]] = [
    Reader.int8,
    Reader.int16,
    Reader.int32,
    Reader.int64,
    Reader.uint16,
    Reader.uint32,
    Reader.float64,
    Reader.boolean,
    Reader.uuid,
    Reader.uvarint,
    Reader.uvarlong,
    Reader.varint,
    Reader.varlong,
    Reader.string,
    Reader.nullable_string,
    Reader.compact_string,
    Reader.compact_nullable_string,
    Reader.bytes_,
    Reader.nullable_bytes,
    Reader.compact_bytes,
    Reader.compact_nullable_bytes,
    Reader.skip_tagged_fields,
    lambda r: r.array_length(compact=True, min_element_size=4),
    lambda r: r.array_length(compact=False),
]


@settings(max_examples=300)
@given(st.binary(max_size=24), st.lists(st.integers(0, len(_READS) - 1), max_size=8))
def test_random_bytes_only_raise_protocol_error(data: bytes, ops: list[int]) -> None:
    r = Reader(data)
    try:
        for op in ops:
            _READS[op](r)
    except ProtocolError:
        pass
    assert 0 <= r.pos <= r.end
