"""Idempotent producer state: retries of a batch are acknowledged with the original offsets.

The leader remembers, per producer id, its epoch and the last few batches it appended
(sequence range and offsets). The table is derived from the log only, so every replica rebuilds
the same table from the same log: it is updated on every append (leader or follower) and trimmed
on truncation, which is why a new leader recognizes a retry of a batch its predecessor appended.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from kraft_spark.raft.records import Batch

# Kafka keeps the metadata of the last five batches per producer.
BATCHES_KEPT = 5


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    epoch: int  # leader epoch of the batch


@dataclass(slots=True)
class ProducerEntry:
    producer_epoch: int
    batches: list[BatchMetadata] = field(default_factory=list)


class SequenceCheck(Enum):
    NEW = "new"  # append it
    DUPLICATE = "duplicate"  # already appended: answer with the original offsets
    OUT_OF_ORDER = "out_of_order"  # before the next expected sequence, not a known batch
    # After the next expected sequence: the producer's earlier batches were acknowledged by a
    # leader whose log this node lacks, so it is (or was, when it appended) a stale leader. A
    # producer sends a batch only once the one before it was acknowledged.
    AHEAD = "ahead"
    FENCED = "fenced"  # an older producer epoch: reject


class ProducerStateTable:
    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}

    def check(
        self, producer_id: int, producer_epoch: int, first_seq: int, count: int
    ) -> tuple[SequenceCheck, BatchMetadata | None]:
        entry = self._producers.get(producer_id)
        if producer_id < 0 or entry is None:
            return SequenceCheck.NEW, None
        if producer_epoch < entry.producer_epoch:
            return SequenceCheck.FENCED, None
        if producer_epoch > entry.producer_epoch or not entry.batches:
            return SequenceCheck.NEW, None
        last_seq = first_seq + count - 1
        for meta in entry.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return SequenceCheck.DUPLICATE, meta
        expected = entry.batches[-1].last_seq + 1
        if first_seq > expected:
            return SequenceCheck.AHEAD, None
        if first_seq != expected:
            return SequenceCheck.OUT_OF_ORDER, None
        return SequenceCheck.NEW, None

    def on_append(self, batch: Batch) -> None:
        if batch.producer_id < 0 or batch.is_control:
            return
        entry = self._producers.get(batch.producer_id)
        if entry is None or batch.producer_epoch > entry.producer_epoch:
            entry = self._producers[batch.producer_id] = ProducerEntry(batch.producer_epoch)
        entry.batches.append(
            BatchMetadata(
                first_seq=batch.base_sequence,
                last_seq=batch.base_sequence + len(batch.records) - 1,
                base_offset=batch.base_offset,
                last_offset=batch.last_offset,
                epoch=batch.epoch,
            )
        )
        del entry.batches[:-BATCHES_KEPT]

    def on_truncate(self, offset: int) -> None:
        """Forget batches at or after ``offset``; a producer with none left is forgotten."""
        for producer_id in list(self._producers):
            entry = self._producers[producer_id]
            entry.batches = [b for b in entry.batches if b.last_offset < offset]
            if not entry.batches:
                del self._producers[producer_id]

    def rebuild(self, batches: Iterable[Batch]) -> None:
        self._producers.clear()
        for batch in batches:
            self.on_append(batch)

    def export(self) -> bytes:
        """The table as bytes, stored in every snapshot: after the log below a snapshot is
        deleted, the table cannot be rebuilt from the log alone."""
        table = [
            [pid, e.producer_epoch,
             [[b.first_seq, b.last_seq, b.base_offset, b.last_offset, b.epoch] for b in e.batches]]
            for pid, e in sorted(self._producers.items())
        ]
        return json.dumps(table, separators=(",", ":")).encode()

    def load(self, data: bytes) -> None:
        """Replace the table with one ``export`` made (b"": empty). Raises ValueError."""
        self._producers.clear()
        if not data:
            return
        try:
            for pid, producer_epoch, batches in json.loads(data):
                self._producers[int(pid)] = ProducerEntry(
                    int(producer_epoch), [BatchMetadata(*map(int, b)) for b in batches]
                )
        except (TypeError, ValueError) as exc:
            self._producers.clear()
            raise ValueError(f"malformed producer state: {exc}") from exc
