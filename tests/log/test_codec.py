"""The v2 record-batch codec: exact round trips, Kafka's layout, clean errors on bad bytes."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_spark.log.codec import (
    CONTROL_FLAG,
    HEADER_SIZE,
    TruncatedBatchError,
    decode_batch,
    encode_batch,
    iter_batches,
    read_header,
    validate_batch,
)
from kraft_spark.log.errors import CorruptRecordError
from kraft_spark.log.varint import decode_zigzag, encode_zigzag
from kraft_spark.raft.records import (
    Batch,
    LeaderChange,
    Record,
    decode_leader_change,
    leader_change_batch,
)

INT64 = st.integers(-(2**63), 2**63 - 1)
maybe_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=12), maybe_bytes), max_size=3).map(tuple)
records = st.builds(
    Record,
    key=maybe_bytes,
    value=maybe_bytes | st.binary(min_size=8000, max_size=9000),
    timestamp_ms=st.integers(0, 2**50),
    headers=headers,
)
batches = st.builds(
    Batch,
    base_offset=st.integers(0, 2**62),
    epoch=st.integers(0, 2**31 - 1),
    records=st.lists(records, min_size=1, max_size=20).map(tuple),
    is_control=st.booleans(),
    producer_id=INT64,
    producer_epoch=st.integers(-(2**15), 2**15 - 1),
    base_sequence=st.integers(-(2**31), 2**31 - 1),
)


def test_crc32c_is_castagnoli() -> None:
    assert crc32c(b"123456789") == 0xE3069283


@given(INT64)
def test_zigzag_round_trip(n: int) -> None:
    data = encode_zigzag(n)
    assert decode_zigzag(data, 0, len(data)) == (n, len(data))


@given(batches)
@settings(max_examples=300, deadline=None)
def test_every_batch_round_trips(batch: Batch) -> None:
    data = encode_batch(batch)
    decoded, end = decode_batch(data)
    assert decoded == batch
    assert end == len(data)
    # Encoding what was decoded afresh (without the bytes it keeps) spells it the same way.
    assert encode_batch(dataclasses.replace(decoded, _wire=None)) == data


@given(batches)
@settings(max_examples=100, deadline=None)
def test_layout_matches_kafka_v2(batch: Batch) -> None:
    data = encode_batch(batch)
    (base, length, epoch, magic, crc, attrs, last_delta, base_ts, max_ts, pid, pepoch, seq,
     count) = struct.unpack_from(">qiibIhiqqqhii", data)
    assert (base, epoch, magic) == (batch.base_offset, batch.epoch, 2)
    assert length == len(data) - 12
    assert crc == crc32c(data[21:])
    assert bool(attrs & CONTROL_FLAG) == batch.is_control and attrs & ~CONTROL_FLAG == 0
    assert count == len(batch.records) and last_delta == count - 1
    assert base_ts == batch.records[0].timestamp_ms
    assert max_ts == batch.max_timestamp_ms
    assert (pid, pepoch, seq) == (batch.producer_id, batch.producer_epoch, batch.base_sequence)


def test_known_record_bytes() -> None:
    """One record spelled out byte by byte (Kafka's record layout)."""
    batch = Batch(0, 1, (Record(b"k", b"vv", 1000, (("h", None),)),))
    data = encode_batch(batch)
    body = data[HEADER_SIZE:]
    # length 12 (zig-zag 24), attributes 0, ts delta 0, offset delta 0, key len 1 (2), "k",
    # value len 2 (4), "vv", 1 header (2): name len 1 (2), "h", value len -1 (1).
    assert body == bytes([24, 0, 0, 0, 2]) + b"k" + bytes([4]) + b"vv" + bytes([2, 2]) + b"h" \
        + bytes([1])


def test_leader_change_control_batch_round_trips() -> None:
    change = LeaderChange(leader_id=2, voters=(1, 2, 3), granting_voters=(2, 3))
    batch = leader_change_batch(40, 7, change, timestamp_ms=123)
    data = encode_batch(batch)
    assert struct.unpack_from(">h", data, 21)[0] & CONTROL_FLAG
    decoded, _ = decode_batch(data)
    assert decoded == batch and decoded.is_control
    value = decoded.records[0].value
    assert value is not None and decode_leader_change(value) == change


def test_timestamps_are_deltas_from_the_first_record() -> None:
    batch = Batch(0, 1, (Record(None, b"a", 500), Record(None, b"b", 90), Record(None, b"c", 700)))
    header = read_header(encode_batch(batch))
    assert (header.base_timestamp, header.max_timestamp) == (500, 700)
    assert decode_batch(encode_batch(batch))[0] == batch


def test_encoding_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch(Batch(0, 1, ()))
    with pytest.raises(ValueError):
        encode_batch(Batch(0, 1, (Record(None, b"x"),), producer_epoch=1 << 20))


def test_every_prefix_is_truncated() -> None:
    data = encode_batch(Batch(3, 2, (Record(b"key", b"value" * 10, 5),) * 3))
    for cut in range(len(data)):
        with pytest.raises(TruncatedBatchError):
            decode_batch(data[:cut])


def test_single_byte_damage_is_caught() -> None:
    """Every byte change is detected, except in baseOffset and partitionLeaderEpoch, which the
    CRC deliberately does not cover (a leader may move a batch without re-hashing it)."""
    batch = Batch(3, 2, (Record(b"key", b"value" * 10, 5), Record(None, None, 9)))
    data = encode_batch(batch)
    for pos in range(len(data)):
        damaged = bytearray(data)
        damaged[pos] ^= 0x5A
        if pos < 8 or 12 <= pos < 16:
            decoded, _ = decode_batch(bytes(damaged))
            assert decoded.records == batch.records
            continue
        with pytest.raises(CorruptRecordError):
            decode_batch(bytes(damaged))


@given(st.binary(max_size=400))
@settings(max_examples=500)
def test_random_bytes_decode_or_raise_cleanly(data: bytes) -> None:
    with contextlib.suppress(CorruptRecordError):
        list(iter_batches(data))


@given(st.binary(min_size=0, max_size=300), st.integers(1, 60), st.booleans())
@settings(max_examples=1000)
def test_random_record_bytes_under_a_valid_crc_raise_cleanly(
    body: bytes, count: int, control: bool
) -> None:
    """Garbage records behind a correct header and CRC reach the record parser itself."""
    tail = struct.pack(">hiqqqhii", CONTROL_FLAG if control else 0, count - 1, 0, 0, -1, -1, -1,
                       count) + body
    data = struct.pack(">qiibI", 0, len(tail) + 9, 1, 2, crc32c(tail)) + tail
    try:
        batch, _ = decode_batch(data)
    except CorruptRecordError:
        return
    assert len(batch.records) == count


def test_mutated_valid_batches_decode_or_raise_cleanly() -> None:
    rng = random.Random(7)
    records = tuple(Record(b"k" * i, b"v" * (i * 40), i, (("n", b"x"),)) for i in range(6))
    batch = Batch(0, 1, records)
    data = encode_batch(batch)
    for _ in range(3000):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(HEADER_SIZE, len(data))] = rng.randrange(256)
        tail = bytes(damaged[21:])
        damaged[17:21] = struct.pack(">I", crc32c(tail))  # make the CRC agree with the damage
        with contextlib.suppress(CorruptRecordError):
            decode_batch(bytes(damaged))


def test_validate_batch_checks_crc_without_decoding() -> None:
    data = bytearray(encode_batch(Batch(0, 1, (Record(None, b"abc"),))))
    assert validate_batch(bytes(data)).record_count == 1
    data[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batch(bytes(data))


def test_wrong_magic_and_attributes_are_rejected() -> None:
    data = bytearray(encode_batch(Batch(0, 1, (Record(None, b"abc"),))))
    bad_magic = bytearray(data)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        decode_batch(bytes(bad_magic))
    compressed = bytearray(data)
    compressed[22] |= 0x01  # gzip
    tail = bytes(compressed[21:])
    compressed[17:21] = struct.pack(">I", crc32c(tail))
    with pytest.raises(CorruptRecordError, match="attributes"):
        decode_batch(bytes(compressed))


def test_iter_batches_reads_consecutive_batches() -> None:
    parts = [Batch(i * 2, 1, (Record(None, b"a"), Record(None, b"b"))) for i in range(5)]
    data = b"".join(encode_batch(b) for b in parts)
    assert list(iter_batches(data)) == parts
    assert list(iter_batches(memoryview(data))) == parts


def test_a_batch_is_encoded_once() -> None:
    batch = Batch(3, 2, (Record(b"k", b"v", 5),))
    first = encode_batch(batch)
    assert encode_batch(batch) is first
    assert dataclasses.replace(batch, _wire=None) == batch  # the bytes are not part of equality


def test_a_decoded_batch_keeps_the_bytes_it_came_in() -> None:
    """A batch read from a peer is written and sent as it came, even where its bytes spell a
    varint longer than the encoder would (accepted, as Kafka accepts them): the value length
    below takes two bytes instead of one."""
    records = struct.pack(">hiqqqhii", 0, 0, 9, 9, -1, -1, -1, 1)
    body = b"\x00\x00\x00\x01" + b"\x86\x00" + b"abc" + b"\x00"  # attrs, deltas, no key, len 3
    record = encode_zigzag(len(body)) + body
    tail = records + record
    data = struct.pack(">qiibI", 7, len(tail) + 9, 4, 2, crc32c(tail)) + tail
    decoded, end = decode_batch(data + b"more")
    assert end == len(data)
    assert decoded.records == (Record(None, b"abc", 9),)
    assert encode_batch(decoded) == data
    canonical = encode_batch(dataclasses.replace(decoded, _wire=None))
    assert len(canonical) == len(data) - 1
    assert decode_batch(canonical)[0] == decoded
