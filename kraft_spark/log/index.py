"""The sparse offset index of one segment (``<base>.index`` beside ``<base>.log``).

File format (Kafka's ``.index`` layout): entries of 8 bytes, big-endian, in increasing order:
``relativeOffset int32`` (the entry batch's base offset minus the segment's base offset) and
``position int32`` (that batch's byte position in the segment). An entry exists for the first
batch of the segment and then for the first batch after every ``interval_bytes`` of log, so a
lookup is a binary search followed by a forward scan of at most about ``interval_bytes``.

The index is a cache, never the truth: it lives in memory, is written to disk when its segment
is sealed (rolled), and is checked against the log when a directory is opened; a missing or
stale file is rebuilt from the segment.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right

ENTRY_SIZE = 8
DEFAULT_INTERVAL_BYTES = 4096
MAX_RELATIVE = (1 << 31) - 1


class OffsetIndex:
    """Entries ``(offset, position)`` of one segment, offsets absolute in memory.

    Invariants: both arrays have the same length; offsets and positions strictly increase;
    the first entry, if any, is ``(base_offset, 0)``.
    """

    __slots__ = ("_bytes_since_entry", "base_offset", "interval_bytes", "offsets", "positions")

    def __init__(self, base_offset: int, interval_bytes: int = DEFAULT_INTERVAL_BYTES) -> None:
        self.base_offset = base_offset
        self.interval_bytes = interval_bytes
        self.offsets = array("q")
        self.positions = array("q")
        self._bytes_since_entry = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def on_append(self, offset: int, position: int, size: int) -> None:
        """Record that a batch with base ``offset`` of ``size`` bytes now sits at ``position``."""
        if not self.offsets or self._bytes_since_entry >= self.interval_bytes:
            self.offsets.append(offset)
            self.positions.append(position)
            self._bytes_since_entry = 0
        self._bytes_since_entry += size

    def resume(self, last_batch_size: int) -> None:
        """After loading a file: the batch of the last entry is ``last_batch_size`` bytes, so
        later ``on_append`` calls keep the usual spacing."""
        self._bytes_since_entry = last_batch_size

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or before ``offset``: where a scan for ``offset`` starts."""
        i = bisect_right(self.offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.offsets[i], self.positions[i]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for batches at or after ``offset``; the next append gets an entry."""
        i = bisect_right(self.offsets, offset - 1)
        del self.offsets[i:]
        del self.positions[i:]
        self._bytes_since_entry = self.interval_bytes

    def last_entry(self) -> tuple[int, int] | None:
        if not self.offsets:
            return None
        return self.offsets[-1], self.positions[-1]

    def to_bytes(self) -> bytes:
        pairs = array("i")
        for offset, position in zip(self.offsets, self.positions, strict=True):
            pairs.append(offset - self.base_offset)
            pairs.append(position)
        if sys.byteorder == "little":
            pairs.byteswap()
        return pairs.tobytes()

    @classmethod
    def from_bytes(
        cls, base_offset: int, data: bytes, interval_bytes: int = DEFAULT_INTERVAL_BYTES
    ) -> OffsetIndex:
        """Parse an index file; ``ValueError`` if it is not a well-formed index."""
        if len(data) % ENTRY_SIZE:
            raise ValueError(f"index size {len(data)} is not a multiple of {ENTRY_SIZE}")
        pairs = array("i")
        pairs.frombytes(data)
        if sys.byteorder == "little":
            pairs.byteswap()
        index = cls(base_offset, interval_bytes)
        prev_rel = prev_pos = -1
        for k in range(0, len(pairs), 2):
            rel, pos = pairs[k], pairs[k + 1]
            if rel <= prev_rel or pos <= prev_pos:
                raise ValueError(f"index entry {k // 2} ({rel}, {pos}) is out of order")
            prev_rel, prev_pos = rel, pos
            index.offsets.append(base_offset + rel)
            index.positions.append(pos)
        if index.offsets and (index.offsets[0] != base_offset or index.positions[0] != 0):
            raise ValueError("the first index entry must be (0, 0)")
        index._bytes_since_entry = interval_bytes  # unknown: index the next append
        return index
