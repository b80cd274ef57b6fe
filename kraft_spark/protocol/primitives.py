"""Kafka's primitive wire types: a bounds-checked :class:`Reader` and ``write_*`` functions.

Encodings (all big-endian, as in Kafka's ``protocol/types``):

* ``int8/16/32/64``, ``uint16``, ``uint32``, ``float64``: fixed width; ``bool``: one byte,
  any non-zero byte reads as true.
* unsigned varint (``uvarint``, at most 5 bytes, value < 2**32) and unsigned varlong (at most
  10 bytes, value < 2**64): 7 bits per byte, least significant group first, high bit = "more".
* ``varint`` / ``varlong``: zig-zag signed 32/64-bit values in that encoding.
* ``string``: int16 length then UTF-8 (-1 = null); ``compact string``: uvarint (length + 1) then
  UTF-8 (0 = null). ``bytes``: int32 length (-1 = null); ``compact bytes``: uvarint (length + 1).
* arrays: int32 count (-1 = null) or compact uvarint (count + 1, 0 = null), then the elements.
* ``uuid``: 16 raw bytes, decoded to :class:`uuid.UUID`.
* tagged-field section: uvarint count, then per field uvarint tag, uvarint size, ``size`` bytes.

Invariants: a :class:`Reader` never reads outside ``[pos, end)`` of its buffer, and every
truncated or malformed read raises :class:`ProtocolError` and nothing else (no ``IndexError``,
``struct.error`` or ``UnicodeDecodeError`` escapes). Writers append to a ``bytearray`` and raise
:class:`EncodeError` for a value that does not fit its type.
"""

from __future__ import annotations

import struct
import sys
import uuid

from kraft_spark.protocol.exceptions import EncodeError, ProtocolError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")

_U32_MAX = 0xFFFF_FFFF
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
_I16_MAX = 0x7FFF
_I32_MAX = 0x7FFF_FFFF
_I32_MIN = -0x8000_0000
_I64_MIN = -0x8000_0000_0000_0000
_I64_MAX = 0x7FFF_FFFF_FFFF_FFFF
NIL_UUID = uuid.UUID(int=0)


class Reader:
    """A cursor over ``buf[pos:end]``; every read advances ``pos`` or raises ProtocolError.

    Invariant: ``0 <= pos <= end <= len(buf)``. Sub-readers (for tagged fields) share ``buf``
    with a narrower ``[pos, end)`` window, so nothing is copied until a value is materialized.
    """

    __slots__ = ("buf", "elements_left", "end", "pos")

    def __init__(
        self,
        data: bytes | bytearray | memoryview,
        pos: int = 0,
        end: int | None = None,
        max_elements: int = sys.maxsize,
    ) -> None:
        view = data if isinstance(data, memoryview) else memoryview(data)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        self.buf: memoryview = view
        self.end: int = len(view) if end is None else end
        self.pos: int = pos
        # Array elements this reader may still decode, over all its arrays (see array_length).
        self.elements_left: int = max_elements
        if not 0 <= pos <= self.end <= len(view):
            raise ValueError("reader window outside its buffer")

    @property
    def remaining(self) -> int:
        """Bytes left in the window."""
        return self.end - self.pos

    def advance(self, n: int) -> int:
        """Consume ``n`` bytes and return the position where they start."""
        start = self.pos
        new = start + n
        if n < 0 or new > self.end:
            raise ProtocolError(f"need {n} bytes at offset {start}, have {self.end - start}")
        self.pos = new
        return start

    def expect_end(self) -> None:
        """Raise unless the whole window has been consumed."""
        if self.pos != self.end:
            raise ProtocolError(f"{self.end - self.pos} unexpected trailing bytes")

    # -- fixed width ---------------------------------------------------------------------------

    def int8(self) -> int:
        v: int = INT8.unpack_from(self.buf, self.advance(1))[0]
        return v

    def int16(self) -> int:
        v: int = INT16.unpack_from(self.buf, self.advance(2))[0]
        return v

    def int32(self) -> int:
        v: int = INT32.unpack_from(self.buf, self.advance(4))[0]
        return v

    def int64(self) -> int:
        v: int = INT64.unpack_from(self.buf, self.advance(8))[0]
        return v

    def uint16(self) -> int:
        v: int = UINT16.unpack_from(self.buf, self.advance(2))[0]
        return v

    def uint32(self) -> int:
        v: int = UINT32.unpack_from(self.buf, self.advance(4))[0]
        return v

    def float64(self) -> float:
        v: float = FLOAT64.unpack_from(self.buf, self.advance(8))[0]
        return v

    def boolean(self) -> bool:
        return self.buf[self.advance(1)] != 0

    def uuid(self) -> uuid.UUID:
        start = self.advance(16)
        return uuid.UUID(bytes=bytes(self.buf[start : start + 16]))

    def raw(self, n: int) -> bytes:
        """``n`` raw bytes, copied out of the buffer."""
        start = self.advance(n)
        return bytes(self.buf[start : start + n])

    # -- variable length integers -------------------------------------------------------------

    def _uvar(self, max_shift: int, limit: int) -> int:
        buf, pos, end = self.buf, self.pos, self.end
        if pos >= end:
            raise ProtocolError("truncated varint")
        b = buf[pos]
        pos += 1
        if b < 0x80:
            self.pos = pos
            return b
        result = b & 0x7F
        shift = 7
        while True:
            if pos >= end:
                raise ProtocolError("truncated varint")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > max_shift:
                raise ProtocolError("varint too long")
        if result > limit:
            raise ProtocolError("varint out of range")
        self.pos = pos
        return result

    def uvarint(self) -> int:
        """Unsigned varint, at most 5 bytes, value < 2**32."""
        pos = self.pos
        if pos < self.end:
            b = self.buf[pos]
            if b < 0x80:  # fast path: one byte, the usual length or count
                self.pos = pos + 1
                return b
        return self._uvar(28, _U32_MAX)

    def uvarlong(self) -> int:
        """Unsigned varlong, at most 10 bytes, value < 2**64."""
        return self._uvar(63, _U64_MAX)

    def varint(self) -> int:
        """Zig-zag signed 32-bit varint."""
        u = self._uvar(28, _U32_MAX)
        return (u >> 1) ^ -(u & 1)

    def varlong(self) -> int:
        """Zig-zag signed 64-bit varlong."""
        u = self._uvar(63, _U64_MAX)
        return (u >> 1) ^ -(u & 1)

    # -- strings and bytes --------------------------------------------------------------------

    def _utf8(self, n: int) -> str:
        start = self.advance(n)
        try:
            return str(self.buf[start : start + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("string is not valid UTF-8") from exc

    def _bytes(self, n: int) -> bytes:
        start = self.advance(n)
        return bytes(self.buf[start : start + n])

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n < 0:
            if n == -1:
                return None
            raise ProtocolError(f"negative string length {n}")
        return self._utf8(n)

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise ProtocolError("null for a non-nullable string")
        return s

    def compact_nullable_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        if n > _I16_MAX:
            raise ProtocolError(f"compact string length {n} exceeds 32767")
        return self._utf8(n)

    def compact_string(self) -> str:
        s = self.compact_nullable_string()
        if s is None:
            raise ProtocolError("null for a non-nullable compact string")
        return s

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            if n == -1:
                return None
            raise ProtocolError(f"negative bytes length {n}")
        return self._bytes(n)

    def bytes_(self) -> bytes:
        b = self.nullable_bytes()
        if b is None:
            raise ProtocolError("null for non-nullable bytes")
        return b

    def compact_nullable_bytes(self) -> bytes | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        return self._bytes(n)

    def compact_bytes(self) -> bytes:
        b = self.compact_nullable_bytes()
        if b is None:
            raise ProtocolError("null for non-nullable compact bytes")
        return b

    # -- arrays and tagged fields -------------------------------------------------------------

    def array_length(self, compact: bool, min_element_size: int = 1) -> int:
        """Element count of an array (-1 = null), checked against the bytes left.

        Each element occupies at least ``max(min_element_size, 1)`` bytes, so a hostile count
        fails here instead of allocating a huge list. The reader's element budget bounds the
        rest: an 8 MiB frame of 3-byte elements is 2.7 million of them, seconds of decoding.
        """
        n = self.uvarint() - 1 if compact else self.int32()
        if n < -1:
            raise ProtocolError(f"negative array length {n}")
        if n * max(min_element_size, 1) > self.end - self.pos:
            raise ProtocolError(f"array of {n} elements exceeds the {self.remaining} bytes left")
        self.elements_left -= n
        if self.elements_left < 0:
            raise ProtocolError(f"array of {n} elements: more than this message may hold")
        return n

    def skip_tagged_fields(self) -> None:
        """Read a tagged-field section and discard every field in it."""
        pos = self.pos
        if pos < self.end and self.buf[pos] == 0:  # fast path: the usual empty section
            self.pos = pos + 1
            return
        for _ in range(self.uvarint()):
            self.uvarint()
            self.advance(self.uvarint())


# -- writers -----------------------------------------------------------------------------------


def _pack(s: struct.Struct, out: bytearray, v: object) -> None:
    try:
        out += s.pack(v)
    except struct.error as exc:
        raise EncodeError(f"{v!r} does not fit {s.format}: {exc}") from exc


def write_int8(out: bytearray, v: int) -> None:
    _pack(INT8, out, v)


def write_int16(out: bytearray, v: int) -> None:
    _pack(INT16, out, v)


def write_int32(out: bytearray, v: int) -> None:
    _pack(INT32, out, v)


def write_int64(out: bytearray, v: int) -> None:
    _pack(INT64, out, v)


def write_uint16(out: bytearray, v: int) -> None:
    _pack(UINT16, out, v)


def write_uint32(out: bytearray, v: int) -> None:
    _pack(UINT32, out, v)


def write_float64(out: bytearray, v: float) -> None:
    _pack(FLOAT64, out, v)


def write_bool(out: bytearray, v: bool) -> None:
    out.append(1 if v else 0)


def write_uuid(out: bytearray, v: uuid.UUID) -> None:
    if not isinstance(v, uuid.UUID):
        raise EncodeError(f"{v!r} is not a UUID")
    out += v.bytes


def _write_uvar(out: bytearray, v: int, limit: int) -> None:
    if not 0 <= v <= limit:
        raise EncodeError(f"unsigned varint {v} out of range")
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def write_uvarint(out: bytearray, v: int) -> None:
    """Unsigned varint (value < 2**32)."""
    if 0 <= v < 0x80:  # the common case: a small length or count
        out.append(v)
    else:
        _write_uvar(out, v, _U32_MAX)


def write_uvarlong(out: bytearray, v: int) -> None:
    """Unsigned varlong (value < 2**64)."""
    _write_uvar(out, v, _U64_MAX)


def write_varint(out: bytearray, v: int) -> None:
    """Zig-zag signed 32-bit varint."""
    if not _I32_MIN <= v <= _I32_MAX:
        raise EncodeError(f"varint {v} out of int32 range")
    _write_uvar(out, ((v << 1) ^ (v >> 31)) & _U32_MAX, _U32_MAX)


def write_varlong(out: bytearray, v: int) -> None:
    """Zig-zag signed 64-bit varlong."""
    if not _I64_MIN <= v <= _I64_MAX:
        raise EncodeError(f"varlong {v} out of int64 range")
    _write_uvar(out, ((v << 1) ^ (v >> 63)) & _U64_MAX, _U64_MAX)


def _utf8(v: str) -> bytes:
    try:
        return v.encode("utf-8")
    except (UnicodeEncodeError, AttributeError) as exc:
        raise EncodeError(f"{v!r} is not an encodable string") from exc


def write_nullable_string(out: bytearray, v: str | None) -> None:
    if v is None:
        out += b"\xff\xff"
        return
    data = _utf8(v)
    if len(data) > _I16_MAX:
        raise EncodeError(f"string of {len(data)} bytes exceeds 32767")
    out += INT16.pack(len(data))
    out += data


def write_string(out: bytearray, v: str) -> None:
    if v is None:
        raise EncodeError("None for a non-nullable string")
    write_nullable_string(out, v)


def write_compact_nullable_string(out: bytearray, v: str | None) -> None:
    if v is None:
        out.append(0)
        return
    data = _utf8(v)
    if len(data) > _I16_MAX:
        raise EncodeError(f"string of {len(data)} bytes exceeds 32767")
    write_uvarint(out, len(data) + 1)
    out += data


def write_compact_string(out: bytearray, v: str) -> None:
    if v is None:
        raise EncodeError("None for a non-nullable string")
    write_compact_nullable_string(out, v)


def _check_bytes(v: object) -> bytes | bytearray | memoryview:
    if not isinstance(v, bytes | bytearray | memoryview):
        raise EncodeError(f"{type(v).__name__} is not bytes")
    return v


def write_nullable_bytes(out: bytearray, v: bytes | None) -> None:
    if v is None:
        out += b"\xff\xff\xff\xff"
        return
    data = _check_bytes(v)
    if len(data) > _I32_MAX:
        raise EncodeError("bytes longer than int32")
    out += INT32.pack(len(data))
    out += data


def write_bytes(out: bytearray, v: bytes) -> None:
    if v is None:
        raise EncodeError("None for non-nullable bytes")
    write_nullable_bytes(out, v)


def write_compact_nullable_bytes(out: bytearray, v: bytes | None) -> None:
    if v is None:
        out.append(0)
        return
    data = _check_bytes(v)
    write_uvarint(out, len(data) + 1)
    out += data


def write_compact_bytes(out: bytearray, v: bytes) -> None:
    if v is None:
        raise EncodeError("None for non-nullable bytes")
    write_compact_nullable_bytes(out, v)


def write_array_length(out: bytearray, n: int | None, compact: bool) -> None:
    """Element count of an array; ``None`` writes a null array."""
    if compact:
        write_uvarint(out, 0 if n is None else n + 1)
    else:
        write_int32(out, -1 if n is None else n)


def write_empty_tagged_fields(out: bytearray) -> None:
    """A tagged-field section with no fields."""
    out.append(0)
