"""An in-memory RaftLog on a simulated disk: it knows what is durable and what a crash loses.

Writes (append, truncate) are applied to the visible log at once and queued as pending disk
operations; ``flush`` makes the queue durable. ``crashed`` returns the log a restarted node would
recover: the durable image, plus (for a torn write) a random prefix of the pending operations
whose last append is cut short and therefore discarded by recovery, as the real log's tail
validation would.
"""

from __future__ import annotations

import random
from bisect import bisect_right

from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch
from kraft_spark.sim.disk_faults import check_rot, disk_error

_Op = tuple[str, Batch | int]


class MemoryLog:
    def __init__(
        self, batches: list[Batch] | None = None, start: int = 0, start_epoch: int = 0
    ) -> None:
        # The log start (KIP-630) and the epoch of the snapshot that ends there: what an
        # empty log's last epoch is (the core learns it from its snapshots).
        self._start = start
        self._durable_start = self._start
        self.start_epoch = self._durable_start_epoch = start_epoch
        self._batches: list[Batch] = []
        self._bases: list[int] = []
        # (epoch, start offset) of every epoch present, ascending in both.
        self._epochs: list[tuple[int, int]] = []
        self._epoch_keys: list[int] = []
        for batch in batches or []:
            self._append_visible(batch)
        self._durable: list[Batch] = list(self._batches)
        self._pending: list[_Op] = []
        self._flushed = self._end()
        # Lowest offset a truncation removed from the durable image since the checker last
        # looked (None: none); lets the checker keep its agreement offsets incremental.
        self.durable_truncated_to: int | None = None
        # A disk fault in force (kraft_spark.sim.disk_faults): appends and flushes fail with
        # this errno; ``ignore_fsync_error`` is the injected shell bug that carries on.
        self.failing: str | None = None
        self.ignore_fsync_error = False
        # Bit rot (kraft_spark.sim.disk_faults): base offsets of durable batches whose bytes
        # went bad; reading one raises as a real segment's CRC check does.
        self.rotten: set[int] = set()

    # ------------------------------------------------------------------ RaftLog

    def start_offset(self) -> int:
        return self._start

    def durable_start_offset(self) -> int:
        return self._durable_start

    def durable_start_epoch(self) -> int:
        return self._durable_start_epoch

    def set_start_epoch(self, epoch: int) -> None:
        """A snapshot ending at the log start was installed (durably) in this epoch."""
        self.start_epoch = self._durable_start_epoch = epoch

    def model_last_epoch(self) -> int:
        """The last epoch as the core sees it: the snapshot's when the log is empty."""
        return self._batches[-1].epoch if self._batches else self.start_epoch

    def end_offset(self) -> int:
        return self._end()

    def last_epoch(self) -> int:
        return self._last_epoch()

    # The model's own view; subclasses that serve reads from elsewhere keep these intact.
    def _end(self) -> int:
        return self._batches[-1].next_offset if self._batches else self._start

    def _last_epoch(self) -> int:
        return self._batches[-1].epoch if self._batches else 0

    def flushed_offset(self) -> int:
        return self._flushed

    def append(self, batch: Batch) -> None:
        if self.failing is not None:
            raise disk_error(self.failing, f"append at offset {batch.base_offset}")
        if batch.base_offset != self._end():
            raise ValueError(f"append at {batch.base_offset}, log ends at {self._end()}")
        if batch.epoch < self._last_epoch():
            raise ValueError(f"append of epoch {batch.epoch} after epoch {self._last_epoch()}")
        self._append_visible(batch)
        self._pending.append(("append", batch))

    def truncate_to(self, offset: int) -> None:
        idx = bisect_right(self._bases, offset - 1)
        if idx and self._batches[idx - 1].next_offset != offset and offset < self._end():
            raise ValueError(f"truncation to {offset} is not a batch boundary")
        del self._batches[idx:]
        del self._bases[idx:]
        self.rotten = {base for base in self.rotten if base < offset}
        while self._epochs and self._epochs[-1][1] >= offset:
            self._epochs.pop()
            self._epoch_keys.pop()
        self._flushed = min(self._flushed, offset)
        self._pending.append(("truncate", offset))

    def truncate_fully_to(self, offset: int, epoch: int = 0) -> None:
        """Durable when it returns, like the segmented log's. ``epoch``: the snapshot's."""
        self.flush()
        self._batches.clear()
        self._bases.clear()
        self._epochs.clear()
        self._epoch_keys.clear()
        self._durable.clear()
        self._start = self._durable_start = self._flushed = offset
        self.start_epoch = self._durable_start_epoch = epoch
        low = self.durable_truncated_to
        self.durable_truncated_to = 0 if low is None else min(low, 0)

    def advance_start_offset(self, offset: int, epoch: int = 0) -> int:
        """Retention: the log now starts at ``offset`` (durably); whole batches that end at or
        before it are dropped. ``epoch``: the snapshot's there. Returns the new log start."""
        if offset <= self._start:
            return self._start
        self.start_epoch = self._durable_start_epoch = epoch
        self.flush()
        drop = 0
        while drop < len(self._batches) and self._batches[drop].next_offset <= offset:
            drop += 1
        del self._batches[:drop]
        del self._bases[:drop]
        self._start = offset
        while len(self._epochs) > 1 and self._epochs[1][1] <= offset:
            self._epochs.pop(0)
            self._epoch_keys.pop(0)
        if self._epochs:
            self._epochs[0] = (self._epochs[0][0], offset)
        self._durable = list(self._batches)
        self._durable_start = offset
        return offset

    def flush(self) -> int:
        if self.failing is not None:
            if not self.ignore_fsync_error:
                raise disk_error(self.failing, "flush")
            # The bug (fsyncgate): the kernel dropped the dirty pages with the failed fsync,
            # and the shell reports the log flushed anyway.
            self._pending.clear()
            self._flushed = self._end()
            return self._flushed
        for op, arg in self._pending:
            self._apply_durable(self._durable, op, arg)
        self._pending.clear()
        self._flushed = self._end()
        return self._flushed

    def read(self, start_offset: int, max_bytes: int) -> list[Batch]:
        out = self.read_unchecked(start_offset, max_bytes)
        if self.rotten:
            check_rot(self.rotten, out)
        return out

    def read_unchecked(self, start_offset: int, max_bytes: int) -> list[Batch]:
        """``read`` as the checker sees the log: bit rot does not stop it."""
        start_offset = max(start_offset, self._start)
        idx = max(bisect_right(self._bases, start_offset) - 1, 0)
        out: list[Batch] = []
        size = 0
        for batch in self._batches[idx:]:
            if batch.next_offset <= start_offset:
                continue
            size += batch.size_estimate()
            if out and size > max_bytes:
                break
            out.append(batch)
        return out

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        idx = bisect_right(self._epoch_keys, epoch) - 1
        if idx < 0:
            return OffsetAndEpoch(0, 0)
        found = self._epochs[idx][0]
        end = self._epochs[idx + 1][1] if idx + 1 < len(self._epochs) else self._end()
        return OffsetAndEpoch(end, found)

    # ------------------------------------------------------------------ simulator side

    def batches(self) -> list[Batch]:
        return self._batches

    def durable_batches(self) -> list[Batch]:
        return self._durable

    def crashed(self, rng: random.Random, torn: bool) -> MemoryLog:
        """The log a node recovers after a crash now."""
        image = list(self._durable)
        lowest: int | None = self.durable_truncated_to
        if torn and self._pending:
            # Some un-fsync'd writes reached the disk; the last one that did is cut short and
            # fails validation, so recovery drops it.
            survivors = rng.randrange(len(self._pending) + 1)
            for op, arg in self._pending[: max(survivors - 1, 0)]:
                if op == "truncate":
                    assert isinstance(arg, int)
                    lowest = arg if lowest is None else min(lowest, arg)
                _apply(image, op, arg)
        recovered = MemoryLog(image, self._durable_start, self._durable_start_epoch)
        recovered.durable_truncated_to = lowest
        recovered.rotten = {b for b in self.rotten if b < recovered.end_offset()}
        return recovered

    def _apply_durable(self, image: list[Batch], op: str, arg: Batch | int) -> None:
        if op == "truncate":
            assert isinstance(arg, int)
            low = self.durable_truncated_to
            self.durable_truncated_to = arg if low is None else min(low, arg)
        _apply(image, op, arg)

    def _append_visible(self, batch: Batch) -> None:
        if not self._epochs or self._epochs[-1][0] != batch.epoch:
            self._epochs.append((batch.epoch, batch.base_offset))
            self._epoch_keys.append(batch.epoch)
        self._batches.append(batch)
        self._bases.append(batch.base_offset)


def _apply(image: list[Batch], op: str, arg: Batch | int) -> None:
    if op == "append":
        assert isinstance(arg, Batch)
        image.append(arg)
    else:
        assert isinstance(arg, int)
        while image and image[-1].base_offset >= arg:
            image.pop()
