"""A stretch of the committed log applied again by the state machine's own code, with every
outcome taken from the full state machine that judged it first: how the Delta tables get each
key's etcd revisions (``create_revision``, ``mod_revision``, ``version``, ``lease``) without a
second derivation of them that could drift from what the etcd and HTTP APIs answer.

Why a replay: the driver's materializer writes a range ``[start, end)`` of the log long after
the observer's state machine applied it (the state is ahead by then), so the entries the state
held at ``end - 1`` are gone. It has, though, the entries of the keys the range writes as they
stood right before it (the ``snapshot`` table's rows, themselves made this way) and the state
machine's judgement of the range (which conditional writes, lease writes and lease operations
failed, which keys each lease revocation or expiry deleted). ``JudgedReplay`` is a
``KeyValueState`` seeded with those entries that runs ``KeyValueState.apply_data`` over the
range, so every ``Entry`` it yields is built by that code (revisions, versions, a group's
shared revision, leases): only the two judgements, which need the whole state, are looked up
instead of made (``_fails``, ``_lease_step``).

Invariant: seeded with every written key's entry as of ``start`` (or ``UNKNOWN_CREATE`` where
that is not known) and given the full state's judgement of ``[start, end)``, the replay holds
for each of those keys exactly the entry the full state held at ``end - 1``, except that an
entry continued from an unknown seed keeps ``create_offset == UNKNOWN_CREATE`` (its
``create_offset`` and ``version`` are then unknown; every other field is exact).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import Entry, KeyValueState
from kraft_spark.state.outcomes import FailedTxn
from kraft_spark.store.leases import LEASE_HEADER, LEASE_OP_HEADER, LeaseTable, lease_of

__all__ = ["UNKNOWN_CREATE", "JudgedReplay", "applied_writes", "write_revisions"]

# The create offset of a seed whose creation is unknown (a ``snapshot`` row written before the
# revision columns existed). No key is created at a negative offset, so an entry that still
# carries it after the replay was continued from that seed, not created again.
UNKNOWN_CREATE: Final = -1


class _NoLeaseTable(LeaseTable):
    """The replay keeps no leases: their judgement comes from the full state."""

    def attach(self, key: bytes, lease_id: int, previous: int) -> None:
        return None


class _Journal(dict[bytes, Entry]):
    """The replay's entries, recording every entry written in order (``apply_data`` sets each
    write's entry with ``entries[key] = ...``)."""

    def __init__(self, seed: Iterable[tuple[bytes, Entry]]) -> None:
        super().__init__(seed)
        self.written: list[tuple[bytes, Entry]] = []

    def __setitem__(self, key: bytes, entry: Entry) -> None:
        self.written.append((key, entry))
        super().__setitem__(key, entry)


class JudgedReplay(KeyValueState):
    """``KeyValueState.apply_data`` over log batches on seeded entries, with the outcomes of
    ``failed_size`` (the size of the failed group starting at an offset, 0 if none failed
    there) and ``deleted_by`` (the keys the lease revocation or expiry at an offset deleted)."""

    __slots__ = ("_deleted_by", "_failed_size", "_journal")

    def __init__(self, seed: Iterable[tuple[bytes, Entry]],
                 failed_size: Callable[[int], int],
                 deleted_by: Callable[[int], Sequence[bytes]]) -> None:
        super().__init__()
        self._failed_size = failed_size
        self._deleted_by = deleted_by
        self._journal = _Journal(seed)
        self._entries = self._journal
        self.leases = _NoLeaseTable()

    @property
    def written(self) -> list[tuple[bytes, Entry]]:
        """Every entry the replay wrote, in log order (a deletion writes none)."""
        return self._journal.written

    def replay(self, batches: Iterable[Batch], start: int) -> None:
        """Apply the data records of ``batches`` at offsets >= ``start`` (a range starts at a
        batch boundary: a group never spans batches, so none is cut)."""
        for batch in batches:
            if batch.is_control or batch.next_offset <= start:
                continue
            skip = max(0, start - batch.base_offset)
            self.apply_data(batch.base_offset + skip, batch.epoch, batch.records[skip:])

    def _fails(self, record: Record, base: int, index: int, records: Sequence[Record]) -> bool:
        size = self._failed_size(base + index)
        if size <= 0:
            return False
        self.failed_txns[base + index] = FailedTxn(size, (), "judged by the state machine")
        return True

    def _lease_step(self, record: Record, offset: int) -> int:
        # Only reached for a record that did not fail (``_fails`` said so first).
        for name, raw in record.headers:
            if name == LEASE_OP_HEADER:
                for key in self._deleted_by(offset):
                    self._entries.pop(key, None)
                return -1
            if name == LEASE_HEADER:
                return lease_of(raw)
        return 0


def applied_writes(batches: Iterable[Batch], start: int,
                   failed_size: Callable[[int], int]) -> list[tuple[int, bytes]]:
    """(offset, key) of every record at offsets >= ``start`` that wrote a key, a value or a
    deletion, and took effect (in log order): the records ``JudgedReplay`` applies to a key."""
    out: list[tuple[int, bytes]] = []
    for batch in batches:
        if batch.is_control or batch.next_offset <= start:
            continue
        skip_until = -1
        for index, record in enumerate(batch.records):
            offset = batch.base_offset + index
            if offset < start or offset < skip_until:
                continue
            if record.headers:
                size = failed_size(offset)
                if size > 0:
                    skip_until = offset + size
                    continue
                if any(name == LEASE_OP_HEADER for name, _raw in record.headers):
                    continue  # a lease operation writes no key of its own
            if record.key is not None:
                out.append((offset, record.key))
    return out


def write_revisions(batches: Sequence[Batch], start: int,
                    failed_size: Callable[[int], int]) -> dict[int, int]:
    """The revision (etcd's ``mod_revision``) of every record at offsets >= ``start`` that
    wrote a key and took effect, by offset: the ``offset`` of the ``Entry`` the state machine
    builds for it, whatever the key held before. A deletion builds no entry, so the replay
    here writes an empty value in its place: the revision a write gets does not depend on its
    value (one revision per record, or one per conditional group)."""
    probe = [
        batch if batch.is_control else Batch(batch.base_offset, batch.epoch, tuple(
            r if r.value is not None or r.key is None
            else Record(r.key, b"", r.timestamp_ms, r.headers) for r in batch.records))
        for batch in batches
    ]
    replay = JudgedReplay((), failed_size, lambda _offset: ())
    replay.replay(probe, start)
    applied = applied_writes(probe, start, failed_size)
    if [key for _offset, key in applied] != [key for key, _entry in replay.written]:
        raise RuntimeError(  # a state machine change this module does not follow yet
            f"the replay from {start} wrote {len(replay.written)} entries for "
            f"{len(applied)} applied writes")
    return {offset: entry.offset for (offset, _key), (_k, entry) in
            zip(applied, replay.written, strict=True)}
