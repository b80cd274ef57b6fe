"""The store's state machine: the latest value of every key, applied from the committed log.

Every node (voters and observers) applies committed data records in offset order: a record with
a value sets its key, a record with a null value deletes it; control records and keyless records
change nothing. Each live key remembers where it was last written (offset, epoch, timestamp),
where it was created (the offset of the write that made it live since it was last absent) and
its version (writes since then: 1 after the creating write), as etcd's ``create_revision``,
``mod_revision`` and ``version``; so a snapshot can be materialized into the ``snapshot`` Delta
table with the same columns as a replay of ``records`` would give, and conditional writes can be
judged.

Conditional writes (``kraft_spark.store.txn``): a group of records whose first carries the
``kraft.txn`` header applies all together, or, if one of its conditions fails against the state
right before it, not at all; the failed group is remembered in ``failed_txns`` (its first offset
-> its size and the failed keys' revisions) for ``TXN_OUTCOME_WINDOW`` offsets, so the node that
took the request, a retry of it and the Delta materializer can tell the outcome. Snapshots carry
that window, so the outcome is the same after a replay from a snapshot.

Invariant: ``applied_offset`` is the next offset to apply; every committed record below it has
been applied exactly once, in order, and none at or above it.

Memory: one dict entry per live key holding a tuple ``(value, offset, epoch, timestamp)``; see
``bench/state_memory.py`` for the measured bytes per key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from kraft_spark.raft.producers import ProducerStateTable
from kraft_spark.raft.records import Batch, Record, control_type_of
from kraft_spark.raft.voter_records import CONTROL_TYPE_VOTERS
from kraft_spark.store.txn import TXN_HEADER, Failure, decode_header, judge

# Failed conditional writes are remembered this many offsets back from the applied offset (and
# stored in snapshots within the same window): an outcome older than that is no longer known.
TXN_OUTCOME_WINDOW = 1_000_000


class Entry(NamedTuple):
    """The live value of one key, where it was last written, where it was created and how many
    writes it has had since (``version``)."""

    value: bytes
    offset: int
    epoch: int
    timestamp_ms: int
    create_offset: int
    version: int


class FailedTxn(NamedTuple):
    """A conditional write that did not apply: its records and the keys whose condition failed
    (empty when its ``kraft.txn`` header was malformed)."""

    size: int
    failures: tuple[Failure, ...]


class KeyValueState:
    """The latest value per key. Not thread-safe: one owner applies, others read copies."""

    __slots__ = ("_entries", "applied_epoch", "applied_offset", "failed_txns", "producers",
                 "voters")

    def __init__(self, applied_offset: int = 0, applied_epoch: int = 0) -> None:
        self._entries: dict[bytes, Entry] = {}
        # The idempotent-producer table as of ``applied_offset`` (committed batches only): what
        # a snapshot stores, so a node that loads it recognises retries exactly as before.
        self.producers = ProducerStateTable()
        # The value of the last VotersRecord applied (KIP-853; None while the voters are
        # static): a snapshot taken now stores it, being the voter set in force at its end.
        self.voters: bytes | None = None
        self.applied_offset = applied_offset
        # The epoch of the last applied batch (or of the snapshot loaded): a snapshot taken now
        # is named (applied_offset, applied_epoch).
        self.applied_epoch = applied_epoch
        # First offset of each failed conditional write -> what failed (insertion = offset
        # order), within TXN_OUTCOME_WINDOW of applied_offset.
        self.failed_txns: dict[int, FailedTxn] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> Entry | None:
        return self._entries.get(key)

    def items(self) -> Iterator[tuple[bytes, Entry]]:
        return iter(self._entries.items())

    def copy_entries(self) -> dict[bytes, Entry]:
        """A shallow copy, for a snapshot writer on another thread (entries are immutable)."""
        return self._entries.copy()

    def apply(self, batch: Batch) -> None:
        """Apply one committed batch. Raises ValueError if it does not start at
        ``applied_offset`` (a gap or a repeat would make the state wrong, silently)."""
        if batch.base_offset != self.applied_offset:
            raise ValueError(
                f"batch at offset {batch.base_offset} applied to a state at {self.applied_offset}"
            )
        if batch.is_control:
            record = batch.records[0]
            if control_type_of(record.key) == CONTROL_TYPE_VOTERS:
                self.voters = record.value
        else:
            self.apply_data(batch.base_offset, batch.epoch, batch.records)
        self.producers.on_append(batch)
        self.applied_offset = batch.next_offset
        self.applied_epoch = batch.epoch

    def apply_data(self, base: int, epoch: int, records: Sequence[Record]) -> None:
        """Apply data records at consecutive offsets from ``base`` (one batch, or a run of
        ``records`` rows of one batch when the warehouse restore replays them); leaves
        ``applied_offset`` alone."""
        entries = self._entries
        skip_until = 0  # records of a failed conditional write are skipped up to here
        for i, record in enumerate(records):
            if i < skip_until:
                continue
            if record.headers and self._fails(record, base, i, len(records)):
                skip_until = i + self.failed_txns[base + i].size
                continue
            key = record.key
            if key is None:
                continue
            if record.value is None:
                entries.pop(key, None)
            else:
                old = entries.get(key)
                offset = base + i
                entries[key] = Entry(
                    record.value, offset, epoch, record.timestamp_ms,
                    old.create_offset if old is not None else offset,
                    old.version + 1 if old is not None else 1,
                )

    def _fails(self, record: Record, base: int, index: int, batch_size: int) -> bool:
        """Judge the conditional write starting at ``record`` (if it starts one) against the
        state now; a failure is remembered and True returned."""
        found, raw = False, None
        for name, value in record.headers:
            if name == TXN_HEADER:
                found, raw = True, value
                break
        if not found:
            return False
        failures: tuple[Failure, ...]
        try:
            size, conditions = decode_header(raw)
        except ValueError:
            # Malformed (the HTTP API never writes one): the size is unknown, so this record
            # alone fails; deterministic like every other outcome.
            size, failures = 1, ()
        else:
            if index + size > batch_size:
                size, failures = batch_size - index, ()
            else:
                failures = judge(conditions, self._entries.get)
                if not failures:
                    return False
        self.failed_txns[base + index] = FailedTxn(size, failures)
        self._forget_old_txns(base + index)
        return True

    def _forget_old_txns(self, now_offset: int) -> None:
        horizon = now_offset - TXN_OUTCOME_WINDOW
        failed = self.failed_txns
        if len(failed) > 1024 and next(iter(failed)) < horizon:
            for offset in [o for o in failed if o < horizon]:
                del failed[offset]

    def txn_failure(self, offset: int) -> FailedTxn | None:
        """The failure of the conditional write starting at ``offset``, if it failed (and is
        within the window); None if it applied or is not a conditional write."""
        return self.failed_txns.get(offset)

    def txns_in_window(self) -> dict[int, FailedTxn]:
        """What a snapshot taken now stores: the failures within the outcome window."""
        horizon = self.applied_offset - TXN_OUTCOME_WINDOW
        return {o: f for o, f in self.failed_txns.items() if o >= horizon}

    def apply_all(self, batches: Iterable[Batch]) -> None:
        for batch in batches:
            self.apply(batch)

    def load(
        self, entries: Iterable[tuple[bytes, Entry]], offset: int, epoch: int, producers: bytes,
        voters: bytes | None = None, *, failed_txns: dict[int, FailedTxn] | None = None,
    ) -> None:
        """Replace everything with a snapshot's content, taken at ``offset`` in ``epoch``.
        Raises ValueError if the producer table is malformed."""
        self.producers.load(producers)
        self.voters = voters
        self.failed_txns = dict(sorted((failed_txns or {}).items()))
        self._entries = dict(entries)
        self.applied_offset = offset
        self.applied_epoch = epoch

    def view(self) -> dict[bytes, bytes]:
        """Key to value, for comparisons in tests and checkers."""
        return {k: e.value for k, e in self._entries.items()}
