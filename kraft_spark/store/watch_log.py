"""The committed log as a watch reads it: a batch's writes as watch events (a lease's
deletes included, numbered within their offset), and ``log_reader``, the catch-up reads of a
``WatchHub`` (``kraft_spark.store.watch``) over a node's log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from kraft_spark.raft.records import Batch
from kraft_spark.store.txn import group_size
from kraft_spark.store.watch_items import BelowLogStart, WatchEvent

__all__ = ["CommittedLog", "ReadCommitted", "batch_events", "log_reader"]

# read_committed(from_offset, max_events) -> (the writes at offsets >= from_offset, in order,
# about max_events of them at most; the next offset to read from). Reads committed data only;
# raises BelowLogStart when from_offset is below the log start.
ReadCommitted = Callable[[int, int], Awaitable[tuple[list[WatchEvent], int]]]



class CommittedLog(Protocol):
    """What :func:`log_reader` reads (``SegmentedLog`` satisfies it)."""

    def start_offset(self) -> int: ...

    def read(self, start_offset: int, max_bytes: int) -> list[Batch]: ...


def batch_events(batch: Batch, failed_group: Callable[[int], int] | None = None,
                 from_offset: int = 0, *, out: list[WatchEvent] | None = None,
                 deleted_by: Callable[[int], Sequence[bytes]] | None = None
                 ) -> list[WatchEvent]:
    """The writes of a committed batch at offsets >= ``from_offset``: none for a control batch,
    none for keyless records, none for the records of a conditional write that failed
    (``failed_group(offset)``: how many records the failed group starting at ``offset`` has, 0
    if none starts there). The writes of a group that applied carry its first offset as their
    revision (``WatchEvent.group``). Appended to ``out`` if given."""
    events = out if out is not None else []
    if batch.is_control:
        return events
    base = batch.base_offset
    skip_until = -1
    group, group_end = None, -1  # offsets below group_end: in the group starting at group
    for index, record in enumerate(batch.records):
        offset = base + index
        if offset < skip_until:
            continue
        if failed_group is not None:
            size = failed_group(offset)
            if size > 0:
                skip_until = offset + size
                continue
        if record.headers:
            size = group_size(record.headers)
            if size:
                group, group_end = offset, offset + size
        if offset < from_offset:
            continue
        in_group = group if offset < group_end and offset != group else None
        if record.key is None:
            # A lease revoked or expired here deletes its keys (``deleted_by``: the state's
            # record of them, kraft_spark.store.leases).
            if deleted_by is not None:
                keys = deleted_by(offset)
                final = len(keys) - 1
                events.extend(WatchEvent(offset, key, None, i, i == final, in_group)
                              for i, key in enumerate(keys))
            continue
        events.append(WatchEvent(offset, record.key, record.value, group=in_group))
    return events


def log_reader(
    the_log: CommittedLog, end: Callable[[], int], snapshot: Callable[[], str | None], *,
    failed_group: Callable[[int], int] | None = None,
    deleted_by: Callable[[int], Sequence[bytes]] | None = None,
    start: Callable[[], int] | None = None, max_bytes: int = 1 << 20,
) -> ReadCommitted:
    """``read_committed`` over a node's log: whole batches below ``end()`` (the state's applied
    offset: the hub's publishes cover the rest), about ``max_events`` writes per call.
    ``snapshot()``: the label of the newest snapshot, for :class:`BelowLogStart`; ``start()``:
    the lowest offset served (default the log start; e.g. no lower than where
    ``failed_group`` still knows the outcome of conditional writes). Reads the log on the
    loop, as the state keeper applies it."""

    async def read(from_offset: int, max_events: int) -> tuple[list[WatchEvent], int]:
        lowest = the_log.start_offset() if start is None else max(the_log.start_offset(),
                                                                  start())
        if from_offset < lowest:
            raise BelowLogStart(from_offset, lowest, snapshot())
        limit = end()
        events: list[WatchEvent] = []
        offset = from_offset
        while offset < limit and len(events) < max_events:
            batches = the_log.read(offset, max_bytes)
            if not batches:
                break
            for batch in batches:
                if batch.next_offset <= offset:
                    continue
                if batch.base_offset >= limit or len(events) >= max_events:
                    return events, offset
                batch_events(batch, failed_group, offset, out=events, deleted_by=deleted_by)
                offset = batch.next_offset
        return events, offset

    return read
