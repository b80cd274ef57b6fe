"""The store's state machine: the latest value of every key, applied from the committed log.

Every node (voters and observers) applies committed data records in offset order: a record with
a value sets its key, a record with a null value deletes it; control records and keyless records
change nothing. Each live key remembers where it was last written (offset, epoch, timestamp), so
a snapshot can be materialized into the ``snapshot`` Delta table with the same columns as a
replay of ``records`` would give.

Invariant: ``applied_offset`` is the next offset to apply; every committed record below it has
been applied exactly once, in order, and none at or above it.

Memory: one dict entry per live key holding a tuple ``(value, offset, epoch, timestamp)``; see
``bench/state_memory.py`` for the measured bytes per key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from kraft_spark.raft.producers import ProducerStateTable
from kraft_spark.raft.records import Batch, control_type_of
from kraft_spark.raft.voter_records import CONTROL_TYPE_VOTERS


class Entry(NamedTuple):
    """The live value of one key and where it was last written."""

    value: bytes
    offset: int
    epoch: int
    timestamp_ms: int


class KeyValueState:
    """The latest value per key. Not thread-safe: one owner applies, others read copies."""

    __slots__ = ("_entries", "applied_epoch", "applied_offset", "producers", "voters")

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
            entries = self._entries
            for i, record in enumerate(batch.records):
                key = record.key
                if key is None:
                    continue
                if record.value is None:
                    entries.pop(key, None)
                else:
                    entries[key] = Entry(
                        record.value, batch.base_offset + i, batch.epoch, record.timestamp_ms
                    )
        self.producers.on_append(batch)
        self.applied_offset = batch.next_offset
        self.applied_epoch = batch.epoch

    def apply_all(self, batches: Iterable[Batch]) -> None:
        for batch in batches:
            self.apply(batch)

    def load(
        self, entries: Iterable[tuple[bytes, Entry]], offset: int, epoch: int, producers: bytes,
        voters: bytes | None = None,
    ) -> None:
        """Replace everything with a snapshot's content, taken at ``offset`` in ``epoch``.
        Raises ValueError if the producer table is malformed."""
        self.producers.load(producers)
        self.voters = voters
        self._entries = dict(entries)
        self.applied_offset = offset
        self.applied_epoch = epoch

    def view(self) -> dict[bytes, bytes]:
        """Key to value, for comparisons in tests and checkers."""
        return {k: e.value for k, e in self._entries.items()}
