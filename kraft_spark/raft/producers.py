"""Idempotent producer state: retries of a batch are acknowledged with the original offsets.

The leader remembers, per producer id, its epoch and the last few batches it appended
(sequence range and offsets). The table is derived from the log only, so every replica rebuilds
the same table from the same log: it is updated on every append (leader or follower) and trimmed
on truncation, which is why a new leader recognizes a retry of a batch its predecessor appended.

The table is bounded: past :data:`MAX_PRODUCERS` producers, the one whose newest batch is the
oldest is forgotten (Kafka expires producers by age, ``producer.id.expiration.ms``; a count is
what keeps memory and snapshots bounded here). The order is kept by newest batch offset (a dict
in append order, re-sorted after a truncation, exported and loaded in that order), so every
replica evicts the same producers: the table stays a function of the log.

Producer ids at or above :data:`KEYED_PRODUCER_BASE` are derived from an HTTP
``Idempotency-Key`` (``key_producer_id``): one batch at sequence 0 per key, so a retry of that
key through any node, under any later leader, is answered with the first append's offsets.
Clients draw their random ids below it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from kraft_spark.raft.records import Batch

# Kafka keeps the metadata of the last five batches per producer.
BATCHES_KEPT = 5
# Producers remembered at most (the least recently appended is forgotten first).
MAX_PRODUCERS = 20_000
# Ids from here to 2**63 - 1 are Idempotency-Keys' (key_producer_id); clients draw below.
KEYED_PRODUCER_BASE = 1 << 62


def key_producer_id(key: str) -> int:
    """The producer id of an HTTP ``Idempotency-Key``: the same on every node and process."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return KEYED_PRODUCER_BASE | (int.from_bytes(digest, "big") & (KEYED_PRODUCER_BASE - 1))


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
    def __init__(self, max_producers: int = MAX_PRODUCERS) -> None:
        # In order of each producer's newest batch (oldest first): the eviction order.
        self._producers: dict[int, ProducerEntry] = {}
        self.max_producers = max_producers

    def __len__(self) -> int:
        return len(self._producers)

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
        entry = self._producers.pop(batch.producer_id, None)  # re-inserted last: the newest
        if entry is None or batch.producer_epoch > entry.producer_epoch:
            entry = ProducerEntry(batch.producer_epoch)
        self._producers[batch.producer_id] = entry
        while len(self._producers) > self.max_producers:
            del self._producers[next(iter(self._producers))]
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
        changed = False
        for producer_id in list(self._producers):
            entry = self._producers[producer_id]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if len(kept) != len(entry.batches):
                changed = True
                entry.batches = kept
            if not entry.batches:
                del self._producers[producer_id]
        if changed:  # back in newest-batch order, as a replica that never had them keeps it
            self._producers = dict(sorted(
                self._producers.items(), key=lambda item: item[1].batches[-1].last_offset))

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
            for pid, e in self._producers.items()  # eviction order: load keeps it
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
            # A table exported by an older version is in producer-id order.
            self._producers = dict(sorted(
                (item for item in self._producers.items() if item[1].batches),
                key=lambda item: item[1].batches[-1].last_offset))
        except (TypeError, ValueError) as exc:
            self._producers.clear()
            raise ValueError(f"malformed producer state: {exc}") from exc
