"""A committed batch as the ``History`` (``kraft_spark.store.history``) takes it: the writes
that took effect, in (offset, index) order, exactly as ``watch_log.batch_events`` turns them
into watch events (a failed conditional write left out, a lease's deletes included; the writes
of a conditional group at its first offset, their shared revision), plus the replicated
compactions.

**Compact is replicated.** etcd's Compact goes through raft, so every member compacts at the
same point; here it is a keyless record with the header ``kraft.etcd.compact`` (the revision in
decimal), which the state machine ignores (a keyless record without a lease operation changes
no key) and every replica's history applies at its offset. A point at or above that offset is
clamped below it, a malformed one ignored: the outcome is a pure function of the log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from kraft_spark.raft.records import Batch, Record
from kraft_spark.store.history import History
from kraft_spark.store.leases import LEASE_HEADER, LEASE_OP_HEADER, lease_of
from kraft_spark.store.txn import group_size

__all__ = ["COMPACT_HEADER", "compact_header", "feed_batch"]

COMPACT_HEADER: Final = "kraft.etcd.compact"


def compact_header(revision: int) -> tuple[str, bytes]:
    return COMPACT_HEADER, str(revision).encode()


def _header(record: Record, name: str) -> bytes | None:
    for header, raw in record.headers:
        if header == name:
            return raw
    return None


def _compact_point(record: Record) -> int | None:
    raw = _header(record, COMPACT_HEADER) if record.headers else None
    if raw is None:
        return None
    text = raw.decode("ascii", errors="replace")
    return int(text) if text.isdigit() and len(text) <= 19 else None


def feed_batch(history: History, batch: Batch, failed_group: Callable[[int], int],
               deleted_by: Callable[[int], Sequence[bytes]]) -> None:
    """Feed ``batch`` (just applied by the state: ``failed_group`` and ``deleted_by`` are the
    state's judgement of it, as ``batch_events`` takes them) to ``history``."""
    if not batch.is_control:
        base = batch.base_offset
        skip_until = -1
        group, group_end = 0, -1  # offsets below group_end: in the group starting at group
        for index, record in enumerate(batch.records):
            offset = base + index
            if offset < skip_until:
                continue
            # Only a record with headers starts a failed group (a conditional write's first
            # record, a lease write or operation: KeyValueState.apply_data judges no other),
            # so a plain record needs no lookup: most of the cost on a plain write's path.
            if record.headers:
                size = failed_group(offset)
                if size > 0:
                    skip_until = offset + size
                    continue
                size = group_size(record.headers)
                if size:
                    group, group_end = offset, offset + size
            # A group that applied is one write: its writes share its first offset.
            revision = group if offset < group_end else offset
            if record.key is None or (record.headers
                                      and _header(record, LEASE_OP_HEADER) is not None):
                # The state machine applies a lease operation, never its key (if any).
                point = _compact_point(record) if record.key is None else None
                if point is not None:
                    history.advance(offset)  # every write below it was fed
                    history.compact(min(point, offset - 1))
                for key in deleted_by(offset):
                    history.delete(revision, key)
                continue
            if record.value is None:
                history.delete(revision, record.key)
                continue
            lease = 0
            raw = _header(record, LEASE_HEADER) if record.headers else None
            if raw is not None:
                # Well-formed here: a malformed one failed the write (``failed_group``).
                try:
                    lease = lease_of(raw)
                except ValueError:
                    continue
            history.put(revision, record.key, record.value, lease)
    history.advance(batch.next_offset)
