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
instead of made (``_judge_group``, ``_lease_step``).

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
from kraft_spark.store.auth import AUTH_OP_HEADER
from kraft_spark.store.leases import LEASE_HEADER, LEASE_OP_HEADER, LeaseTable, lease_of
from kraft_spark.store.txn import TXN_HEADER, decode_header

__all__ = ["UNKNOWN_CREATE", "JudgedReplay", "write_revisions"]

# The create offset of a seed whose creation is unknown (a ``snapshot`` row written before the
# revision columns existed). No key is created at a negative offset, so an entry that still
# carries it after the replay was continued from that seed, not created again.
UNKNOWN_CREATE: Final = -1


class _NoLeaseTable(LeaseTable):
    """The replay keeps no leases: their judgement comes from the full state."""

    def attach(self, key: bytes, lease_id: int, previous: int) -> None:
        return None


class JudgedReplay(KeyValueState):
    """``KeyValueState.apply_data`` over log batches on seeded entries, with the outcomes of
    ``failed_size`` (the size of the failed group starting at an offset, 0 if none failed
    there) and ``deleted_by`` (the keys the lease revocation or expiry at an offset deleted)."""

    __slots__ = ("_deleted_by", "_failed_size")

    def __init__(self, seed: Iterable[tuple[bytes, Entry]],
                 failed_size: Callable[[int], int],
                 deleted_by: Callable[[int], Sequence[bytes]]) -> None:
        super().__init__()
        self._failed_size = failed_size
        self._deleted_by = deleted_by
        self._entries = dict(seed)
        self.leases = _NoLeaseTable()

    def replay(self, batches: Iterable[Batch], start: int) -> None:
        """Apply the data records of ``batches`` at offsets >= ``start`` (a range starts at a
        batch boundary: a group never spans batches, so none is cut)."""
        for batch in batches:
            if batch.is_control or batch.next_offset <= start:
                continue
            skip = max(0, start - batch.base_offset)
            self.apply_data(batch.base_offset + skip, batch.epoch, batch.records[skip:])

    def _judge_group(self, record: Record, base: int, index: int,
                     records: Sequence[Record]) -> int:
        """The full state's judgement of the group (or lone lease write or operation) starting
        at ``record``: its size when it applies, minus its size when it failed, 0 when none
        starts there (``KeyValueState._judge_group``'s answer)."""
        failed = self._failed_size(base + index)
        if failed > 0:
            self.failed_txns[base + index] = FailedTxn(failed, (), "judged by the state machine")
            return -failed
        for name, raw in record.headers:
            if name == TXN_HEADER:
                try:
                    size = decode_header(raw)[0]
                except ValueError:
                    return 0  # the full state judged it failed: not reached
                return min(size, len(records) - index)
        return 0

    def _lease_step(self, record: Record, offset: int) -> int:
        # Only reached for a record that did not fail (``_judge_group`` said so first).
        for name, raw in record.headers:
            if name == AUTH_OP_HEADER:
                return -1  # users and roles: no key
            if name == LEASE_OP_HEADER:
                for key in self._deleted_by(offset):
                    self._entries.pop(key, None)
                return -1
            if name == LEASE_HEADER:
                return lease_of(raw)
        return 0


def write_revisions(batches: Sequence[Batch], start: int,
                    failed_size: Callable[[int], int]) -> dict[int, int]:
    """The revision (etcd's ``mod_revision``) of every record at offsets >= ``start`` that
    wrote a key and took effect, by offset: the ``offset`` of the ``Entry`` the state machine
    builds for it. The replay here gives each such record a key of its own (its offset) and
    turns a deletion, which builds no entry, into a write of an empty value: the revision a
    write gets depends on where it is in the log and whether it took effect (one per record,
    or one per conditional group), not on its key, value or the state before it."""
    probe = []
    for batch in batches:
        if batch.is_control or batch.next_offset <= start:
            continue
        base = batch.base_offset
        probe.append(Batch(base, batch.epoch, tuple(
            r if r.key is None
            else Record(b"%d" % (base + i), b"" if r.value is None else r.value,
                        r.timestamp_ms, r.headers)
            for i, r in enumerate(batch.records))))
    replay = JudgedReplay((), failed_size, lambda _offset: ())
    replay.replay(probe, start)
    return {int(key): entry.offset for key, entry in replay.items()}
