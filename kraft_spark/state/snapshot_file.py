"""Snapshot files in Kafka's format (KIP-630): ``<end offset>-<epoch>.checkpoint``.

A snapshot named ``(end_offset, epoch)`` holds the state after applying every record below
``end_offset``; ``epoch`` is the epoch of the record at ``end_offset - 1``. The file is a run of
uncompressed v2 record batches, all in the snapshot's epoch, with offsets counting from 0:

1. a control batch whose one record is a SnapshotHeaderRecord (control type 3: version int16,
   LastContainedLogTimestamp int64, empty tagged fields). Its record header ``kraft.producers``
   carries the idempotent-producer table, which a node needs to keep recognising retries of
   batches whose log has been deleted, and ``kraft.txn.failed`` (when not empty) the failed
   conditional writes it keeps as JSON
   ``[[first offset, size, [[key hex, mod_offset, version], ...], reason], ...]``,
   ``kraft.leases`` the leases in force and the keys leases deleted (``LeaseTable.export``,
   with etcd's users and roles under ``auth`` when any were added: ``AuthTable.export``;
   each key's lease is its record's ``kraft.lease`` header, int64), and ``kraft.outcomes.from``
   (int64) the offset from which those two hold *every* outcome (``state.outcomes``; a file
   without it held the ``TXN_OUTCOME_WINDOW`` offsets before its end);
2. data batches: one record per live key (key, value, the timestamp of its last write), with
   record headers ``kraft.offset`` (int64) and ``kraft.epoch`` (int32) naming that write's
   revision (its offset in the log, or its conditional group's first offset:
   ``kraft_spark.store.txn``) and epoch, so the ``snapshot`` Delta table can be rebuilt with
   its columns, and ``kraft.create_offset`` (int64) and ``kraft.version`` (int64), the key's
   creating revision and version (a file written before they existed reads as create_offset
   = offset, version = 1); a replay from the file gives the revisions a replay of the log
   does;
3. a control batch holding a SnapshotFooterRecord (control type 4: version int16, empty tags).

Once the voter set is dynamic (KIP-853), the header is followed, as in Kafka's snapshots, by a
KRaftVersionRecord (control type 5, kraft.version 1) and the VotersRecord in force at the
snapshot's end offset (control type 6), each a control batch of its own.

Kafka's ``kafka-dump-log.sh`` reads these files (tests/kafka). A file is trusted only when every
batch passes its CRC, the header comes first, the footer last and nothing follows it.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kraft_spark.log.codec import LOG_OVERHEAD, decode_batch, encode_batch
from kraft_spark.log.errors import CorruptRecordError
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch, Record, control_key, control_type_of
from kraft_spark.raft.snapshot_api import InvalidSnapshotError
from kraft_spark.raft.voter_records import (
    CONTROL_TYPE_KRAFT_VERSION,
    CONTROL_TYPE_VOTERS,
    encode_kraft_version,
)
from kraft_spark.raft.voter_set import KRAFT_VERSION_DYNAMIC
from kraft_spark.state.machine import Entry, FailedTxn
from kraft_spark.store.txn import Failure

SUFFIX = ".checkpoint"
PART_SUFFIX = ".checkpoint.part"
CORRUPT_SUFFIX = ".checkpoint.corrupt"
CONTROL_TYPE_SNAPSHOT_HEADER = 3
CONTROL_TYPE_SNAPSHOT_FOOTER = 4
PRODUCERS_HEADER = "kraft.producers"
OFFSET_HEADER = "kraft.offset"
EPOCH_HEADER = "kraft.epoch"
CREATE_OFFSET_HEADER = "kraft.create_offset"
VERSION_HEADER = "kraft.version"
FAILED_TXNS_HEADER = "kraft.txn.failed"
LEASES_HEADER = "kraft.leases"
OUTCOMES_FROM_HEADER = "kraft.outcomes.from"
LEASE_ENTRY_HEADER = "kraft.lease"
# Data batches are cut at this many records or bytes (Kafka's snapshot writer: 8 KiB..1 MiB);
# small enough that encoding one holds the GIL well under a millisecond.
RECORDS_PER_BATCH = 500
BYTES_PER_BATCH = 1024 * 1024

_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")


# Kafka's OffsetAndEpoch names a snapshot: its end offset (exclusive) and epoch.
SnapshotId = OffsetAndEpoch


def file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{SUFFIX}"


def label(snapshot_id: SnapshotId) -> str:
    """How logs and errors name a snapshot: ``<end offset>-<epoch>``."""
    return f"{snapshot_id.offset}-{snapshot_id.epoch}"


def parse_name(name: str) -> SnapshotId | None:
    match = _NAME.match(name)
    if match is None:
        return None
    return SnapshotId(int(match.group(1)), int(match.group(2)))


@dataclass(frozen=True, slots=True)
class SnapshotContent:
    snapshot_id: SnapshotId
    entries: list[tuple[bytes, Entry]]
    producers: bytes
    last_timestamp_ms: int
    # The VotersRecord value in force at the snapshot's end (None: static voters).
    voters: bytes | None = None
    # The failed conditional writes of the outcome window (KeyValueState.failed_txns).
    failed_txns: dict[int, FailedTxn] = field(default_factory=dict)
    # The leases in force and recent deletions by leases (LeaseTable.export).
    leases: dict[str, Any] = field(default_factory=dict)
    # The offset from which failed_txns and the leases' deletions are complete (None: a file
    # written before kraft.outcomes.from; KeyValueState.load knows what those held).
    outcomes_from: int | None = None


def encode_failed_txns(failed: dict[int, FailedTxn]) -> bytes:
    return json.dumps(
        [[o, f.size, [[x.key.hex(), x.mod_offset, x.version] for x in f.failures], f.reason]
         for o, f in sorted(failed.items())], separators=(",", ":")).encode()


def decode_failed_txns(raw: bytes, where: str) -> dict[int, FailedTxn]:
    try:
        return {int(row[0]): FailedTxn(int(row[1]), tuple(
                    Failure(bytes.fromhex(k), int(m), int(v)) for k, m, v in row[2]),
                    str(row[3]) if len(row) > 3 else "")
                for row in json.loads(raw)}
    except (ValueError, TypeError) as exc:
        raise InvalidSnapshotError(f"{where}: malformed {FAILED_TXNS_HEADER} header: {exc}") \
            from None


def _header_value(last_timestamp_ms: int) -> bytes:
    return struct.pack(">hq", 0, last_timestamp_ms) + b"\x00"


def _footer_value() -> bytes:
    return struct.pack(">h", 0) + b"\x00"


def encode_snapshot(
    snapshot_id: SnapshotId,
    entries: Iterable[tuple[bytes, Entry]],
    producers: bytes,
    last_timestamp_ms: int,
    voters: bytes | None = None,
    *,
    failed_txns: dict[int, FailedTxn] | None = None,
    leases: dict[str, Any] | None = None,
    outcomes_from: int | None = None,
) -> Iterator[bytes]:
    """The file's bytes, batch by batch (a writer streams them to disk). ``voters``: the
    encoded VotersRecord in force at the snapshot's end, if the voter set is dynamic;
    ``failed_txns``: the failed conditional writes kept, complete from ``outcomes_from``
    (``KeyValueState.outcomes_to_store``)."""
    epoch = snapshot_id.epoch
    header_headers: tuple[tuple[str, bytes | None], ...] = ((PRODUCERS_HEADER, producers),)
    if outcomes_from is not None:
        if not 0 <= outcomes_from <= snapshot_id.offset:
            raise ValueError(f"outcomes_from {outcomes_from} is outside 0..{snapshot_id.offset}")
        header_headers += ((OUTCOMES_FROM_HEADER, _I64.pack(outcomes_from)),)
    if failed_txns:
        header_headers += ((FAILED_TXNS_HEADER, encode_failed_txns(failed_txns)),)
    if leases:
        header_headers += ((LEASES_HEADER, json.dumps(leases, separators=(",", ":")).encode()),)
    header = Record(
        key=control_key(CONTROL_TYPE_SNAPSHOT_HEADER),
        value=_header_value(last_timestamp_ms),
        timestamp_ms=last_timestamp_ms,
        headers=header_headers,
    )
    yield encode_batch(Batch(0, epoch, (header,), is_control=True))
    offset = 1
    if voters is not None:
        for ctype, value in ((CONTROL_TYPE_KRAFT_VERSION, encode_kraft_version(
                KRAFT_VERSION_DYNAMIC)), (CONTROL_TYPE_VOTERS, voters)):
            record = Record(key=control_key(ctype), value=value, timestamp_ms=last_timestamp_ms)
            yield encode_batch(Batch(offset, epoch, (record,), is_control=True))
            offset += 1
    pending: list[Record] = []
    size = 0
    for key, entry in entries:
        record = Record(
            key=key,
            value=entry.value,
            timestamp_ms=entry.timestamp_ms,
            headers=(
                (OFFSET_HEADER, _I64.pack(entry.offset)),
                (EPOCH_HEADER, _I32.pack(entry.epoch)),
                (CREATE_OFFSET_HEADER, _I64.pack(entry.create_offset)),
                (VERSION_HEADER, _I64.pack(entry.version)),
                *(((LEASE_ENTRY_HEADER, _I64.pack(entry.lease)),) if entry.lease else ()),
            ),
        )
        pending.append(record)
        size += record.size_estimate()
        if len(pending) >= RECORDS_PER_BATCH or size >= BYTES_PER_BATCH:
            yield encode_batch(Batch(offset, epoch, tuple(pending)))
            offset += len(pending)
            pending, size = [], 0
    if pending:
        yield encode_batch(Batch(offset, epoch, tuple(pending)))
        offset += len(pending)
    footer = Record(
        key=control_key(CONTROL_TYPE_SNAPSHOT_FOOTER),
        value=_footer_value(),
        timestamp_ms=last_timestamp_ms,
    )
    yield encode_batch(Batch(offset, epoch, (footer,), is_control=True))


def _entry_of(record: Record, where: str) -> tuple[bytes, Entry]:
    headers = dict(record.headers)
    raw_offset, raw_epoch = headers.get(OFFSET_HEADER), headers.get(EPOCH_HEADER)
    if record.key is None or record.value is None or raw_offset is None or raw_epoch is None:
        raise InvalidSnapshotError(f"{where}: a data record without key, value, offset or epoch")
    if len(raw_offset) != 8 or len(raw_epoch) != 4:
        raise InvalidSnapshotError(f"{where}: malformed kraft.offset / kraft.epoch header")
    offset = _I64.unpack(raw_offset)[0]
    raw_create, raw_version = headers.get(CREATE_OFFSET_HEADER), headers.get(VERSION_HEADER)
    if raw_create is None and raw_version is None:  # written before revisions were kept
        create_offset, version = offset, 1
    elif raw_create is None or raw_version is None or len(raw_create) != 8 or len(
            raw_version) != 8:
        raise InvalidSnapshotError(f"{where}: malformed kraft.create_offset / kraft.version")
    else:
        create_offset, version = _I64.unpack(raw_create)[0], _I64.unpack(raw_version)[0]
    raw_lease = headers.get(LEASE_ENTRY_HEADER)
    if raw_lease is not None and len(raw_lease) != 8:
        raise InvalidSnapshotError(f"{where}: malformed kraft.lease")
    entry = Entry(record.value, offset, _I32.unpack(raw_epoch)[0], record.timestamp_ms,
                  create_offset, version, _I64.unpack(raw_lease)[0] if raw_lease else 0)
    return record.key, entry


def decode_snapshot(data: bytes, snapshot_id: SnapshotId, where: str) -> SnapshotContent:
    """Check and decode a whole snapshot file; ``InvalidSnapshotError`` names ``where`` and
    what is wrong (CRC, truncation, missing header or footer, bytes after the footer)."""
    pos = 0
    expected_offset = 0
    producers = b""
    failed_txns: dict[int, FailedTxn] = {}
    leases: dict[str, Any] = {}
    outcomes_from: int | None = None
    voters: bytes | None = None
    last_ts = -1
    entries: list[tuple[bytes, Entry]] = []
    seen_header = seen_footer = False
    while pos < len(data):
        if seen_footer:
            raise InvalidSnapshotError(f"{where}: {len(data) - pos} bytes after the footer")
        if len(data) - pos < LOG_OVERHEAD:
            raise InvalidSnapshotError(f"{where}: truncated at position {pos}")
        try:
            batch, pos = decode_batch(data, pos)
        except CorruptRecordError as exc:
            raise InvalidSnapshotError(f"{where}: position {pos}: {exc}") from exc
        if batch.base_offset != expected_offset or batch.epoch != snapshot_id.epoch:
            raise InvalidSnapshotError(
                f"{where}: batch at offset {batch.base_offset} epoch {batch.epoch}, expected "
                f"offset {expected_offset} epoch {snapshot_id.epoch}"
            )
        expected_offset = batch.next_offset
        if batch.is_control:
            try:
                ctype = control_type_of(batch.records[0].key)
            except ValueError as exc:
                raise InvalidSnapshotError(f"{where}: {exc}") from exc
            first = batch.base_offset == 0
            if ctype == CONTROL_TYPE_SNAPSHOT_HEADER and not seen_header and first:
                seen_header = True
                header_fields = dict(batch.records[0].headers)
                producers = header_fields.get(PRODUCERS_HEADER) or b""
                raw_failed = header_fields.get(FAILED_TXNS_HEADER)
                if raw_failed:
                    failed_txns = decode_failed_txns(raw_failed, where)
                raw_leases = header_fields.get(LEASES_HEADER)
                if raw_leases:
                    try:
                        leases = dict(json.loads(raw_leases))
                    except (ValueError, TypeError) as exc:
                        raise InvalidSnapshotError(f"{where}: malformed kraft.leases: {exc}") \
                            from None
                raw_from = header_fields.get(OUTCOMES_FROM_HEADER)
                if raw_from is not None:
                    if len(raw_from) != 8:
                        raise InvalidSnapshotError(f"{where}: malformed {OUTCOMES_FROM_HEADER}")
                    outcomes_from = _I64.unpack(raw_from)[0]
                    if not 0 <= outcomes_from <= snapshot_id.offset:
                        raise InvalidSnapshotError(
                            f"{where}: {OUTCOMES_FROM_HEADER} {outcomes_from} is outside "
                            f"0..{snapshot_id.offset}")
                value = batch.records[0].value or b""
                if len(value) >= 10:
                    last_ts = struct.unpack_from(">q", value, 2)[0]
            elif ctype == CONTROL_TYPE_KRAFT_VERSION and seen_header:
                pass
            elif ctype == CONTROL_TYPE_VOTERS and seen_header:
                voters = batch.records[0].value
            elif ctype == CONTROL_TYPE_SNAPSHOT_FOOTER and seen_header:
                seen_footer = True
            else:
                raise InvalidSnapshotError(
                    f"{where}: unexpected control record type {ctype} at offset {batch.base_offset}"
                )
            continue
        if not seen_header:
            raise InvalidSnapshotError(f"{where}: data before the SnapshotHeaderRecord")
        entries.extend(_entry_of(r, where) for r in batch.records)
    if not seen_footer:
        raise InvalidSnapshotError(f"{where}: no SnapshotFooterRecord (truncated file)")
    return SnapshotContent(snapshot_id, entries, producers, last_ts, voters, failed_txns, leases,
                           outcomes_from)
