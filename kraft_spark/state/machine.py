"""The store's state machine: the latest value of every key, applied from the committed log.

Every node (voters and observers) applies committed data records in offset order: a record with
a value sets its key, a record with a null value deletes it; control records and keyless records
change nothing. Each live key remembers its last write's revision, epoch and timestamp, the
revision of the write that created it (that made it live since it was last absent) and its
version (writes since then: 1 after the creating write), as etcd's ``mod_revision``,
``create_revision`` and ``version``, so conditional writes can be judged. A write's revision is
its record's offset, except inside a conditional group that applies: every write of the group
shares the group's first offset, as etcd's Txn shares one revision (``kraft_spark.store.txn``
says why the first).

Conditional writes (``kraft_spark.store.txn``): a group of records whose first carries the
``kraft.txn`` header applies all together, or, if one of its conditions fails against the state
right before it, not at all; the failed group is remembered in ``failed_txns`` (its first offset
-> its size and the failed keys' revisions), so the node that took the request, a retry of it
and the Delta materializer can tell the outcome. Outcomes are answered from a horizon every
replica computes alike and unknown (``OutcomeUnknown``) below it, never "applied"; see
``kraft_spark.state.outcomes``.

etcd's users and roles (``kraft_spark.store.auth``): a keyless ``kraft.auth.op`` record changes
``auth``, or fails like a lease operation (its reason in ``failed_txns``) and changes nothing.

Invariant: ``applied_offset`` is the next offset to apply; every committed record below it has
been applied exactly once, in order, and none at or above it.

Memory: one dict entry per live key holding a tuple ``(value, offset, epoch, timestamp)``; see
``bench/state_memory.py`` for the measured bytes per key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from kraft_spark.raft.producers import ProducerStateTable
from kraft_spark.raft.records import Batch, Record, control_type_of
from kraft_spark.raft.voter_records import CONTROL_TYPE_VOTERS
from kraft_spark.state.outcomes import (
    PRUNE_EVERY_FRACTION,
    TXN_OUTCOME_WINDOW,
    FailedTxn,
    OutcomeUnknown,
    legacy_outcomes_from,
)
from kraft_spark.store.auth import AUTH_OP_HEADER, AuthTable
from kraft_spark.store.leases import (
    LEASE_HEADER,
    LEASE_OP_HEADER,
    LeaseTable,
    decode_op,
    lease_of,
)
from kraft_spark.store.txn import TXN_HEADER, Failure, decode_header, judge

__all__ = ["TXN_OUTCOME_WINDOW", "Entry", "FailedTxn", "KeyValueState", "OutcomeUnknown"]


class Entry(NamedTuple):
    """The live value of one key, where it was last written, where it was created and how many
    writes it has had since (``version``). ``offset`` and ``create_offset`` are revisions: a
    record's offset, or for a write of a conditional group the group's first offset."""

    value: bytes
    offset: int  # the last write's revision (etcd's mod_revision, the HTTP mod_offset)
    epoch: int
    timestamp_ms: int
    create_offset: int  # the creating write's revision (create_revision)
    version: int
    lease: int = 0  # the lease it is attached to (kraft_spark.store.leases), 0: none


class KeyValueState:
    """The latest value per key. Not thread-safe: one owner applies, others read copies."""

    __slots__ = ("_entries", "_next_prune", "_outcomes_from", "applied_epoch", "applied_offset",
                 "auth", "failed_txns", "leases", "outcome_hold", "outcome_window", "producers",
                 "voters")

    def __init__(self, applied_offset: int = 0, applied_epoch: int = 0, *,
                 outcome_window: int = TXN_OUTCOME_WINDOW) -> None:
        """``outcome_window``: how many offsets back every replica knows outcomes (the same on
        every replica of a cluster; tests use small ones)."""
        if outcome_window < 1:
            raise ValueError(f"outcome_window must be at least 1, got {outcome_window}")
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
        # order): every one at or after _outcomes_from, maybe some before (pruned lazily).
        self.failed_txns: dict[int, FailedTxn] = {}
        self.leases = LeaseTable()
        # etcd's users and roles (kraft_spark.store.auth): kraft.auth.op records.
        self.auth = AuthTable()
        self.outcome_window = outcome_window
        # Invariant: every failure and lease deletion at offsets >= _outcomes_from (and below
        # applied_offset) is in failed_txns / leases.deleted. A state that starts at an offset
        # knows nothing before it; only pruning raises it, never above what retained_from says.
        self._outcomes_from = applied_offset
        self._next_prune = applied_offset
        # The lowest offset whose outcomes a local reader still needs (the driver's
        # materializer: StateKeeper sets it), None: none; kept past the window, never
        # answered publicly (see kraft_spark.state.outcomes).
        self.outcome_hold: Callable[[], int | None] | None = None

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
        if self.applied_offset >= self._next_prune:
            self._prune()

    def apply_data(self, base: int, epoch: int, records: Sequence[Record]) -> None:
        """Apply data records at consecutive offsets from ``base`` (one batch, or a run of
        ``records`` rows of one batch when the warehouse restore replays them); leaves
        ``applied_offset`` alone."""
        entries = self._entries
        skip_until = 0  # records of a failed conditional write are skipped up to here
        # Records below index group_end belong to a conditional group that applies: their
        # writes share its revision, its first offset (kraft_spark.etcd.revision).
        group_end, group_revision = 0, 0
        for i, record in enumerate(records):
            if i < skip_until:
                continue
            lease = 0
            if record.headers:
                size = self._judge_group(record, base, i, records)
                if size < 0:
                    skip_until = i - size
                    continue
                if size:
                    group_end, group_revision = i + size, base + i
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
                revision = group_revision if i < group_end else base + i
                entries[key] = Entry(
                    record.value, revision, epoch, record.timestamp_ms,
                    old.create_offset if old is not None else revision,
                    old.version + 1 if old is not None else 1,
                    lease,
                )
                if lease or (old is not None and old.lease):
                    self.leases.attach(key, lease, old.lease if old is not None else 0)

    def _lease_step(self, record: Record, offset: int) -> int:
        """A lease or auth operation is applied here (-1); a write attached to a lease gives
        its id, or -1 (failed) when the lease does not exist; 0 for any other record."""
        for name, raw in record.headers:
            if name == AUTH_OP_HEADER:
                reason = self.auth.apply(raw)
                if reason:
                    self._failed(offset, FailedTxn(1, (), reason))
                return -1
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

    def _judge_group(self, record: Record, base: int, index: int,
                     records: Sequence[Record]) -> int:
        """Judge the conditional write starting at ``record`` against the state now: its size
        when it applies, minus its size when it fails (the failure remembered), 0 when
        ``record`` starts none."""
        found, raw = False, None
        for name, value in record.headers:
            if name == TXN_HEADER:
                found, raw = True, value
                break
        if not found:
            return 0
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
                        return size
                    self._failed(base + index, FailedTxn(size, (), missing))
                    return -size
        self._failed(base + index, FailedTxn(size, failures))
        return -size

    def _failed(self, offset: int, failure: FailedTxn) -> None:
        self.failed_txns[offset] = failure

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

    # ------------------------------------------------------------------ outcomes

    @property
    def outcome_horizon(self) -> int:
        """The lowest offset whose outcome is answered: the same on every replica at the same
        applied offset (``kraft_spark.state.outcomes``)."""
        return max(self._outcomes_from, self.applied_offset - self.outcome_window)

    @property
    def outcomes_from(self) -> int:
        """The lowest offset from which this state holds every outcome (<= the horizon)."""
        return self._outcomes_from

    @property
    def retained_from(self) -> int:
        """Where pruning may cut and what a snapshot taken now stores from: the window, or
        lower down to ``outcome_hold``; never below what this state holds."""
        cut = self.applied_offset - self.outcome_window
        hold = self.outcome_hold() if self.outcome_hold is not None else None
        if hold is not None:
            cut = min(cut, hold)
        return max(self._outcomes_from, cut)

    def _prune(self) -> None:
        """Forget outcomes below ``retained_from`` (answers do not change: they come from the
        horizon, not from what happens to be left). Runs every window/8 applied offsets, so
        the dicts are rebuilt O(window) times per window at most."""
        cut = self.retained_from
        failed = self.failed_txns
        if failed and next(iter(failed)) < cut:
            self.failed_txns = {o: f for o, f in failed.items() if o >= cut}
        self.leases.forget_deleted_before(cut)
        self._outcomes_from = cut
        self._next_prune = self.applied_offset + max(1, self.outcome_window
                                                     // PRUNE_EVERY_FRACTION)

    def _check_known(self, offset: int) -> None:
        horizon = self.outcome_horizon
        if offset < horizon:
            raise OutcomeUnknown(offset, horizon, self.outcome_window)

    def txn_failure(self, offset: int) -> FailedTxn | None:
        """The failure of the conditional write (or lease write or operation) at ``offset``
        if it failed; None if it applied or is not one. Raises ``OutcomeUnknown`` below the
        horizon. Offsets at or above ``applied_offset`` are not judged yet: the caller waits
        until the state applied them (``NodeStore.outcome`` does)."""
        self._check_known(offset)
        return self.failed_txns.get(offset)

    def lease_deleted(self, offset: int) -> tuple[bytes, ...]:
        """The keys the lease revocation or expiry at ``offset`` deleted (none if it is not
        one). Raises ``OutcomeUnknown`` below the horizon."""
        self._check_known(offset)
        return self.leases.deleted_at(offset)

    def known_outcomes(self, start: int, end: int
                       ) -> tuple[dict[int, FailedTxn], dict[int, tuple[bytes, ...]]]:
        """Every failure and lease deletion at ``start <= offset < end``, for a local reader
        that needs them all (the Delta materializer): complete from ``outcomes_from`` on, which
        ``outcome_hold`` may keep below the horizon. Raises ``OutcomeUnknown`` rather than
        return a partial answer (a failure missing from it would read as "applied")."""
        if start < self._outcomes_from:
            raise OutcomeUnknown(start, self._outcomes_from, self.outcome_window)
        failed = {o: f for o, f in self.failed_txns.items() if start <= o < end}
        deleted = {o: k for o, k in self.leases.deleted.items() if start <= o < end}
        return failed, deleted

    def txns_in_window(self) -> dict[int, FailedTxn]:
        """The failures at or after the horizon: what every replica answers alike."""
        horizon = self.outcome_horizon
        return {o: f for o, f in self.failed_txns.items() if o >= horizon}

    def leases_export(self) -> dict[str, Any]:
        """The leases and the deletions at or after the horizon (alike on every replica)."""
        return self.leases.export(since=self.outcome_horizon)

    def outcomes_to_store(self) -> tuple[int, dict[int, FailedTxn], dict[str, Any]]:
        """What a snapshot taken now stores: the offset its outcomes start at
        (``kraft.outcomes.from``), the failures and the leases with the deletions from it;
        the users and roles ride along under the leases' ``auth`` key (``AuthTable.export``:
        one JSON header of the snapshot for both, absent when none were ever added)."""
        since = self.retained_from
        leases = self.leases.export(since=since)
        auth = self.auth.export()
        if auth:
            leases["auth"] = auth
        return (since, {o: f for o, f in self.failed_txns.items() if o >= since}, leases)

    def apply_all(self, batches: Iterable[Batch]) -> None:
        for batch in batches:
            self.apply(batch)

    def load(
        self, entries: Iterable[tuple[bytes, Entry]], offset: int, epoch: int, producers: bytes,
        voters: bytes | None = None, *, failed_txns: dict[int, FailedTxn] | None = None,
        leases: dict[str, Any] | None = None, outcomes_from: int | None = None,
    ) -> None:
        """Replace everything with a snapshot's content, taken at ``offset`` in ``epoch``.
        ``outcomes_from``: where its outcomes start (``kraft.outcomes.from``; None: a snapshot
        written before it, which held the window). Raises ValueError if the producer table is
        malformed or ``outcomes_from`` out of range."""
        if outcomes_from is None:
            outcomes_from = legacy_outcomes_from(offset)
        if not 0 <= outcomes_from <= offset:
            raise ValueError(f"the snapshot at {offset} says its outcomes start at "
                             f"{outcomes_from}")
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
        auth = (leases or {}).get("auth") or {}
        if not isinstance(auth, dict):
            raise ValueError("malformed auth table in the snapshot: not an object")
        self.auth = AuthTable()
        self.auth.load(auth)
        self.applied_offset = offset
        self.applied_epoch = epoch
        self._outcomes_from = outcomes_from
        self._next_prune = offset

    def view(self) -> dict[bytes, bytes]:
        """Key to value, for comparisons in tests and checkers."""
        return {k: e.value for k, e in self._entries.items()}
