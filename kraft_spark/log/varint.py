"""Zig-zag varints (Kafka's ``varint`` / ``varlong``) with a table for the common small values.

Kafka v2 records store every length, delta and count as a zig-zag varint: ``n`` becomes
``(n << 1) ^ (n >> 63)`` and is then written 7 bits at a time, low bits first. Records are
encoded and decoded in Python loops, so the hot values (small non-negative lengths and deltas)
come from a precomputed table of encoded bytes instead of a loop per value.
"""

from __future__ import annotations

from kraft_spark.log.errors import CorruptRecordError

# Zig-zag encodings of 0 .. TABLE_SIZE - 1; covers every record of a normal metadata batch.
TABLE_SIZE = 1 << 14

# Kafka's varlong is at most 10 bytes; anything longer is corrupt input, not a big number.
_MAX_VARINT_BYTES = 10


def encode_zigzag(n: int) -> bytes:
    """Encode a signed 64-bit value as a zig-zag varint."""
    if not -(1 << 63) <= n < (1 << 63):
        raise ValueError(f"value {n} does not fit a signed 64-bit varlong")
    u = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


ZIGZAG: list[bytes] = [encode_zigzag(i) for i in range(TABLE_SIZE)]
"""``ZIGZAG[n]`` is the encoding of the non-negative ``n`` (``n < TABLE_SIZE``)."""

MINUS_ONE = encode_zigzag(-1)
"""The encoding of -1, Kafka's length of a null key or value."""


def zigzag(n: int) -> bytes:
    """``encode_zigzag`` through the table when it can."""
    if 0 <= n < TABLE_SIZE:
        return ZIGZAG[n]
    return encode_zigzag(n)


def decode_zigzag(buf: bytes | bytearray | memoryview, pos: int, limit: int) -> tuple[int, int]:
    """Decode one zig-zag varint at ``pos`` that must end before ``limit``.

    Returns ``(value, next_pos)``. Raises ``CorruptRecordError`` for a varint that runs past
    ``limit`` or is longer than 10 bytes.
    """
    u = 0
    shift = 0
    start = pos
    while True:
        if pos >= limit:
            raise CorruptRecordError(f"varint at byte {start} runs past the end of its record")
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            if u >> 64:
                raise CorruptRecordError(f"varint at byte {start} overflows 64 bits")
            return (u >> 1) ^ -(u & 1), pos
        shift += 7
        if pos - start >= _MAX_VARINT_BYTES:
            raise CorruptRecordError(f"varint at byte {start} is longer than 10 bytes")
