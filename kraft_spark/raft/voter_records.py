"""KIP-853's control records: KRaftVersionRecord (control type 5) and VotersRecord (type 6).

Both are Kafka's flexible version-0 messages (``KRaftVersionRecord.json``, ``VotersRecord.json``):
compact strings and arrays, an empty tagged-field section after every struct. Each is written
as a control batch of its own (our Batch invariant: one control record per control batch), the
KRaftVersionRecord first; Kafka's ``kafka-dump-log.sh`` decodes both.
"""

from __future__ import annotations

import struct
import uuid

from kraft_spark.raft.records import (
    Batch,
    Record,
    control_key,
    control_type_of,
    encode_uvarint,
)
from kraft_spark.raft.voter_set import Endpoint, Voter, VoterSet

CONTROL_TYPE_KRAFT_VERSION = 5
CONTROL_TYPE_VOTERS = 6
# The kraft.version range our nodes support (KRaftVersionFeature of every voter we write).
SUPPORTED_KRAFT_VERSIONS = (0, 1)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")


def _compact_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return encode_uvarint(len(raw) + 1) + raw


class _Reader:
    """A cursor over one message; every read raises ValueError when the bytes run out."""

    def __init__(self, buf: bytes, what: str) -> None:
        self.buf, self.pos, self.what = buf, 0, what

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise ValueError(f"truncated {self.what}")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def uint16(self) -> int:
        return int(_U16.unpack(self.take(2))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError(f"varint too long in {self.what}")

    def compact_length(self) -> int:
        n = self.uvarint() - 1
        if n < 0:
            raise ValueError(f"null array or string in {self.what}")
        return n

    def string(self) -> str:
        try:
            return self.take(self.compact_length()).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"invalid UTF-8 in {self.what}") from None

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise ValueError(f"{len(self.buf) - self.pos} trailing bytes in {self.what}")


def encode_kraft_version(kraft_version: int) -> bytes:
    return _I16.pack(0) + _I16.pack(kraft_version) + b"\x00"


def decode_kraft_version(buf: bytes) -> int:
    r = _Reader(buf, "KRaftVersionRecord")
    r.int16()
    version = r.int16()
    r.skip_tags()
    r.done()
    return version


def encode_voters(voters: VoterSet) -> bytes:
    out = [_I16.pack(0), encode_uvarint(len(voters.voters) + 1)]
    lo, hi = SUPPORTED_KRAFT_VERSIONS
    for voter in voters.voters:
        out.append(_I32.pack(voter.node_id) + voter.directory_id.bytes)
        out.append(encode_uvarint(len(voter.endpoints) + 1))
        for ep in voter.endpoints:
            out.append(_compact_string(ep.name) + _compact_string(ep.host) + _U16.pack(ep.port))
            out.append(b"\x00")
        out.append(_I16.pack(lo) + _I16.pack(hi) + b"\x00")  # KRaftVersionFeature
        out.append(b"\x00")  # the voter's tags
    out.append(b"\x00")
    return b"".join(out)


def decode_voters(buf: bytes) -> VoterSet:
    """A VotersRecord's voter set; ValueError on malformed bytes or an empty/duplicate set."""
    r = _Reader(buf, "VotersRecord")
    r.int16()
    voters = []
    for _ in range(r.compact_length()):
        node_id = r.int32()
        directory = uuid.UUID(bytes=r.take(16))
        endpoints = []
        for _ in range(r.compact_length()):
            endpoints.append(Endpoint(r.string(), r.string(), r.uint16()))
            r.skip_tags()
        r.int16()
        r.int16()
        r.skip_tags()
        r.skip_tags()
        voters.append(Voter(node_id, directory, tuple(endpoints)))
    r.skip_tags()
    r.done()
    return VoterSet(tuple(voters))


def _control_batch(base_offset: int, epoch: int, ctype: int, value: bytes, ts: int) -> Batch:
    record = Record(key=control_key(ctype), value=value, timestamp_ms=ts)
    return Batch(base_offset=base_offset, epoch=epoch, records=(record,), is_control=True)


def kraft_version_batch(base_offset: int, epoch: int, kraft_version: int, ts: int) -> Batch:
    return _control_batch(
        base_offset, epoch, CONTROL_TYPE_KRAFT_VERSION, encode_kraft_version(kraft_version), ts)


def voters_batch(base_offset: int, epoch: int, voters: VoterSet, ts: int) -> Batch:
    return _control_batch(base_offset, epoch, CONTROL_TYPE_VOTERS, encode_voters(voters), ts)


def voters_in(batch: Batch) -> VoterSet | None:
    """The voter set a batch carries (a VotersRecord control batch), else None. A malformed
    VotersRecord raises ValueError: the log is damaged (it passed its CRC, so a writer bug)."""
    if not batch.is_control:
        return None
    record = batch.records[0]
    if control_type_of(record.key) != CONTROL_TYPE_VOTERS or record.value is None:
        return None
    return decode_voters(record.value)
