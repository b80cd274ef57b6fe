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
from typing import Any, NamedTuple

from kraft_spark.raft.producers import ProducerStateTable
from kraft_spark.raft.records import Batch, Record, control_type_of
from kraft_spark.raft.voter_records import CONTROL_TYPE_VOTERS
from kraft_spark.store.leases import (
    LEASE_HEADER,
    LEASE_OP_HEADER,
    LeaseTable,
    decode_op,
    lease_of,
)
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
    lease: int = 0  # the lease it is attached to (kraft_spark.store.leases), 0: none


class FailedTxn(NamedTuple):
    """A write that did not apply: its records, the keys whose condition failed, and why when
    no condition says it (a malformed header, a lease that does not exist)."""

    size: int
    failures: tuple[Failure, ...]
    reason: str = ""


class KeyValueState:
    """The latest value per key. Not thread-safe: one owner applies, others read copies."""

    __slots__ = ("_entries", "applied_epoch", "applied_offset", "failed_txns", "leases",
                 "producers", "voters")

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
        self.leases = LeaseTable()

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
            lease = 0
            if record.headers:
                if self._fails(record, base, i, records):
                    skip_until = i + self.failed_txns[base + i].size
                    continue
                lease = self._lease_step(record, base + i)
                if lease < 0:
                    continue  # a lease operation, or a write to a lease that does not exist
            key = record.key
            if key is None:
                continue
            old = entries.get(key)
            if record.value is None:
                if old is not None:
                    del entries[key]
                    if old.lease:
                        self.leases.attach(key, 0, old.lease)
            else:
                offset = base + i
                entries[key] = Entry(
                    record.value, offset, epoch, record.timestamp_ms,
                    old.create_offset if old is not None else offset,
                    old.version + 1 if old is not None else 1,
                    lease,
                )
                if lease or (old is not None and old.lease):
                    self.leases.attach(key, lease, old.lease if old is not None else 0)

    def _lease_step(self, record: Record, offset: int) -> int:
        """A lease operation is applied here (-1); a write attached to a lease gives its id,
        or -1 (failed) when the lease does not exist; 0 for any other record."""
        for name, raw in record.headers:
            if name == LEASE_OP_HEADER:
                try:
                    reason, doomed = self.leases.apply(decode_op(raw), offset)
                except ValueError as exc:
                    reason, doomed = str(exc), []
                for key in doomed:
                    self._entries.pop(key, None)
                if reason:
                    self._failed(offset, FailedTxn(1, (), reason))
                return -1
            if name == LEASE_HEADER:
                try:
                    lease = lease_of(raw)
                except ValueError as exc:
                    self._failed(offset, FailedTxn(1, (), str(exc)))
                    return -1
                if lease not in self.leases.leases:
                    self._failed(offset, FailedTxn(
                        1, (), f"lease {lease} not found (expired or revoked)"))
                    return -1
                return lease
        return 0

    def _fails(self, record: Record, base: int, index: int, records: Sequence[Record]) -> bool:
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
            if index + size > len(records):
                size, failures = len(records) - index, ()
            else:
                failures = judge(conditions, self._entries.get, self._entries.items)
                if not failures:
                    missing = self._missing_lease(records[index:index + size])
                    if not missing:
                        return False
                    self._failed(base + index, FailedTxn(size, (), missing))
                    return True
        self._failed(base + index, FailedTxn(size, failures))
        return True

    def _failed(self, offset: int, failure: FailedTxn) -> None:
        self.failed_txns[offset] = failure
        self._forget_old_txns(offset)

    def _missing_lease(self, group: Sequence[Record]) -> str:
        """Why a conditional group must fail for its leases (all or nothing), or ""."""
        for record in group:
            for name, raw in record.headers:
                if name == LEASE_HEADER:
                    try:
                        lease = lease_of(raw)
                    except ValueError as exc:
                        return str(exc)
                    if lease not in self.leases.leases:
                        return f"lease {lease} not found (expired or revoked)"
        return ""

    def _forget_old_txns(self, now_offset: int) -> None:
        horizon = now_offset - TXN_OUTCOME_WINDOW
        self.leases.forget_deleted_before(horizon)
        failed = self.failed_txns
        if len(failed) > 1024 and next(iter(failed)) < horizon:
            for offset in [o for o in failed if o < horizon]:
                del failed[offset]

    def txn_failure(self, offset: int) -> FailedTxn | None:
        """The failure of the conditional write starting at ``offset``, if it failed (and is
        within the window); None if it applied or is not a conditional write."""
        return self.failed_txns.get(offset)

    def leases_export(self) -> dict[str, Any]:
        """The leases and the deletions of the outcome window, as a snapshot stores them."""
        return self.leases.export(since=self.applied_offset - TXN_OUTCOME_WINDOW)

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
        leases: dict[str, Any] | None = None,
    ) -> None:
        """Replace everything with a snapshot's content, taken at ``offset`` in ``epoch``.
        Raises ValueError if the producer table is malformed."""
        self.producers.load(producers)
        self.voters = voters
        self.failed_txns = dict(sorted((failed_txns or {}).items()))
        self._entries = dict(entries)
        attached: dict[int, set[bytes]] = {}
        for key, entry in self._entries.items():
            if entry.lease:
                attached.setdefault(entry.lease, set()).add(key)
        try:
            self.leases.load(leases or {}, attached)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"malformed leases in the snapshot: {exc}") from None
        self.applied_offset = offset
        self.applied_epoch = epoch

    def view(self) -> dict[bytes, bytes]:
        """Key to value, for comparisons in tests and checkers."""
        return {k: e.value for k, e in self._entries.items()}
