"""The most recent batches, kept as objects so a leader serving Fetch does not re-read and
re-decode what it has just written.

Invariant: the cache holds a contiguous suffix of the log (the last batches appended, in order,
ending at the log end), bounded by the encoded size ``max_bytes``. Truncation drops the part at or
after the cut; reopening the log starts with an empty cache. The batches are the very objects that
were appended, and the codec round-trips exactly, so serving them equals serving the disk.

A cached batch is taken out of the cyclic garbage collector (``gc_untrack``): it cannot be part
of a cycle, and walking the cache was most of every older collection's pause under load.
"""

from __future__ import annotations

from bisect import bisect_right

from kraft_spark.log.gc_untrack import untrack_batch
from kraft_spark.raft.records import Batch


class TailCache:
    __slots__ = ("_bases", "_batches", "_bytes", "_head", "_sizes", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._bases: list[int] = []
        self._batches: list[Batch] = []
        self._sizes: list[int] = []
        self._head = 0  # entries before _head are evicted (compacted lazily)
        self._bytes = 0

    def first_offset(self) -> int | None:
        return self._bases[self._head] if self._head < len(self._bases) else None

    def add(self, batch: Batch, size: int) -> None:
        if size > self.max_bytes:
            self.clear()
            return
        untrack_batch(batch)
        self._bases.append(batch.base_offset)
        self._batches.append(batch)
        self._sizes.append(size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            self._bytes -= self._sizes[self._head]
            self._head += 1
        if self._head > 64 and self._head * 2 > len(self._bases):
            del self._bases[: self._head]
            del self._batches[: self._head]
            del self._sizes[: self._head]
            self._head = 0

    def truncate_from(self, offset: int) -> None:
        """Drop batches whose base offset is at or after ``offset``."""
        i = max(self._head, bisect_right(self._bases, offset - 1, lo=self._head))
        for size in self._sizes[i:]:
            self._bytes -= size
        del self._bases[i:]
        del self._batches[i:]
        del self._sizes[i:]
        if self._head >= len(self._bases):
            self.clear()

    def clear(self) -> None:
        self._bases.clear()
        self._batches.clear()
        self._sizes.clear()
        self._head = 0
        self._bytes = 0

    def read(self, start_offset: int, max_bytes: int) -> list[Batch] | None:
        """Batches from the one holding ``start_offset`` within ``max_bytes`` (at least one), or
        None when the cache does not reach back to ``start_offset``."""
        first = self.first_offset()
        if first is None or start_offset < first:
            return None
        i = bisect_right(self._bases, start_offset, lo=self._head) - 1
        out = [self._batches[i]]
        total = self._sizes[i]
        for j in range(i + 1, len(self._bases)):
            total += self._sizes[j]
            if total > max_bytes:
                break
            out.append(self._batches[j])
        return out
