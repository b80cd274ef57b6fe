"""``kraft-spark dump-log``: print segments batch by batch, like Kafka's DumpLogSegments.

Read-only and lock-free (it may look at the log of a running node). Every batch is fully
validated (length, magic, CRC, records, contiguous offsets); the first invalid one stops the
dump with an error that names the file, the position and the offset.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from typing import TextIO

from kraft_spark.log.checkpoints import PARTITION_DIR_NAME
from kraft_spark.log.codec import BatchHeader, decode_batch, read_header
from kraft_spark.log.errors import CorruptRecordError
from kraft_spark.log.segment import parse_segment_name
from kraft_spark.raft.records import (
    CONTROL_TYPE_LEADER_CHANGE,
    Batch,
    Record,
    control_type_of,
    decode_leader_change,
)
from kraft_spark.raft.voter_records import (
    CONTROL_TYPE_KRAFT_VERSION,
    CONTROL_TYPE_VOTERS,
    decode_kraft_version,
    decode_voters,
)

# KIP-630 snapshot files (kraft_spark.state.snapshot_file writes them) and their control types.
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_SNAPSHOT_HEADER, _SNAPSHOT_FOOTER = 3, 4


@dataclass(frozen=True, slots=True)
class InvalidBatch:
    path: str
    position: int
    offset: int
    reason: str

    def message(self) -> str:
        return (
            f"{self.path}: invalid batch at position {self.position} (offset {self.offset}): "
            f"{self.reason}"
        )


def segment_files(path: str) -> list[str]:
    """The segment files named by ``path``: a ``.log`` file, a partition directory, or a log
    directory holding ``__cluster_metadata-0``. ``FileNotFoundError`` if there are none."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such file or directory")
    candidates = [path, os.path.join(path, PARTITION_DIR_NAME)]
    for directory in candidates:
        if os.path.isdir(directory):
            listed = os.listdir(directory)
            names = sorted(n for n in listed if parse_segment_name(n) is not None)
            names += sorted(n for n in listed if _SNAPSHOT_NAME.match(n))
            if names:
                return [os.path.join(directory, n) for n in names]
    raise FileNotFoundError(f"{path}: no segment files (*.log) here or in {PARTITION_DIR_NAME}/")


def _bool(flag: bool) -> str:
    return "true" if flag else "false"


def describe_batch(header: BatchHeader, position: int) -> str:
    last_seq = -1
    if header.base_sequence >= 0:
        last_seq = header.base_sequence + header.last_offset_delta
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.record_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {last_seq} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} partitionLeaderEpoch: {header.epoch} "
        f"isTransactional: false isControl: {_bool(header.is_control)} "
        f"position: {position} CreateTime: {header.max_timestamp} size: {header.size} "
        f"magic: {header.magic} compresscodec: none crc: {header.crc} isvalid: true"
    )


def _text(data: bytes | None) -> str:
    """Printable on one line: UTF-8 as is, anything else (and control characters) escaped."""
    if data is None:
        return "null"
    text = data.decode("utf-8", "backslashreplace")
    return text if text.isprintable() else repr(text)[1:-1]


def describe_record(batch: Batch, i: int, record: Record) -> str:
    sequence = batch.base_sequence + i if batch.base_sequence >= 0 else -1
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    line = (
        f"| offset: {batch.base_offset + i} CreateTime: {record.timestamp_ms} "
        f"keySize: {key_size} valueSize: {value_size} sequence: {sequence} "
        f"headerKeys: [{','.join(name for name, _ in record.headers)}]"
    )
    if batch.is_control:
        try:
            ctype = control_type_of(record.key)
            if ctype == CONTROL_TYPE_LEADER_CHANGE and record.value is not None:
                change = decode_leader_change(record.value)
                return (
                    f"{line} LeaderChange: version: {change.version} leaderId: "
                    f"{change.leader_id} voters: {list(change.voters)} grantingVoters: "
                    f"{list(change.granting_voters)}"
                )
            value = record.value or b""
            if ctype == CONTROL_TYPE_VOTERS:
                return f"{line} KRaftVoters: {decode_voters(value).describe()}"
            if ctype == CONTROL_TYPE_KRAFT_VERSION:
                return f"{line} KRaftVersion: {decode_kraft_version(value)}"
            if ctype == _SNAPSHOT_HEADER and len(value) >= 10:
                version, last = struct.unpack_from(">hq", value)
                return (f"{line} SnapshotHeader {{version={version}, "
                        f"lastContainedLogTimestamp={last}}}")
            if ctype == _SNAPSHOT_FOOTER and len(value) >= 2:
                version = struct.unpack_from(">h", value)[0]
                return f"{line} SnapshotFooter {{version={version}}}"
            return f"{line} controlType: {ctype}"
        except ValueError as exc:
            return f"{line} control record not decodable: {exc}"
    return f"{line} key: {_text(record.key)} payload: {_text(record.value)}"


def dump_segment(path: str, out: TextIO, *, print_data: bool = False) -> InvalidBatch | None:
    """Print every batch of one segment; return the first invalid batch, if any.

    Reads the whole file at once: segments are bounded by the segment size (64 MiB default).
    """
    name = os.path.basename(path)
    base = parse_segment_name(name)
    snapshot = _SNAPSHOT_NAME.match(name)
    print(f"Dumping {path}", file=out)
    if base is not None:
        print(f"Log starting offset: {base}", file=out)
    elif snapshot is not None:
        # A snapshot's batches count from 0; its name carries the log offset it ends at.
        base = 0
        print(f"Snapshot end offset: {int(snapshot.group(1))}, epoch: {int(snapshot.group(2))}",
              file=out)
    with open(path, "rb") as f:
        data = f.read()
    position = 0
    expected = base
    while position < len(data):
        offset = expected if expected is not None else -1
        try:
            header = read_header(data, position)
            offset = header.base_offset
            batch, _ = decode_batch(data, position)
            if expected is not None and header.base_offset != expected:
                raise CorruptRecordError(f"base offset {header.base_offset}, expected {expected}")
        except CorruptRecordError as exc:
            return InvalidBatch(path, position, offset, str(exc))
        print(describe_batch(header, position), file=out)
        if print_data:
            for i, record in enumerate(batch.records):
                print(describe_record(batch, i, record), file=out)
        position += header.size
        expected = header.next_offset
    return None


def dump(path: str, out: TextIO, *, print_data: bool = False) -> InvalidBatch | None:
    """Dump every segment named by ``path``; stop at the first invalid batch."""
    for segment in segment_files(path):
        invalid = dump_segment(segment, out, print_data=print_data)
        if invalid is not None:
            return invalid
    return None
