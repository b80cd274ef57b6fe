"""The leader-epoch cache: the first offset of every epoch in the log, and its checkpoint file.

In memory it is two parallel lists (epochs, start offsets), both strictly increasing, so every
query is a binary search. On disk it is ``leader-epoch-checkpoint`` in Kafka's text format::

    0               <- format version
    2               <- number of entries
    1 0             <- "epoch startOffset", one line per epoch, in order
    3 120

Invariant kept with the log: there is exactly one entry per epoch that has at least one batch in
the log, and its start offset is that epoch's first batch. ``truncate_from`` keeps it true when
the log is truncated; the log rewrites the file (atomically) at the next flush.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import pairwise

from kraft_spark.log.errors import InvalidAppendError
from kraft_spark.raft.log_api import OffsetAndEpoch

CHECKPOINT_VERSION = 0


class EpochCache:
    __slots__ = ("_epochs", "_starts")

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries or []:
            self.assign(epoch, start)

    def __len__(self) -> int:
        return len(self._epochs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EpochCache):
            return NotImplemented
        return self._epochs == other._epochs and self._starts == other._starts

    __hash__ = None  # type: ignore[assignment]

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    def latest_epoch(self) -> int:
        """The epoch of the last batch; 0 for an empty log."""
        return self._epochs[-1] if self._epochs else 0

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Note that a batch of ``epoch`` starts at ``start_offset``; True if a new epoch began.

        Raises ``InvalidAppendError`` if the epoch or the offset goes backwards.
        """
        if self._epochs:
            last_epoch, last_start = self._epochs[-1], self._starts[-1]
            if epoch == last_epoch:
                return False
            if epoch > last_epoch and start_offset == last_start:
                # The last entry holds no record: the log start moved to its offset (retention,
                # truncate_before) before anything was appended there. The new epoch replaces it.
                self._epochs[-1] = epoch
                return True
            if epoch < last_epoch or start_offset <= last_start:
                raise InvalidAppendError(
                    f"epoch {epoch} at offset {start_offset} does not follow epoch {last_epoch} "
                    f"which starts at offset {last_start}"
                )
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def truncate_from(self, offset: int) -> bool:
        """Forget epochs that start at or after ``offset``; True if anything changed."""
        i = bisect_right(self._starts, offset - 1)
        if i == len(self._starts):
            return False
        del self._epochs[i:]
        del self._starts[i:]
        return True

    def truncate_before(self, offset: int) -> bool:
        """The log now starts at ``offset``: forget epochs that end at or before it, and start
        the epoch holding it at ``offset`` (Kafka's truncateFromStart). True if changed."""
        i = bisect_right(self._starts, offset) - 1
        if i < 0 or (i == 0 and self._starts[0] == offset):
            return False
        del self._epochs[:i]
        del self._starts[:i]
        self._starts[0] = offset
        return True

    def clear(self) -> None:
        self._epochs.clear()
        self._starts.clear()

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the batch holding ``offset`` (None before the first entry).

        Only meaningful for ``offset`` below the log end; the caller checks that bound.
        """
        i = bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else None

    def start_offset_of(self, epoch: int) -> int | None:
        i = bisect_right(self._epochs, epoch) - 1
        if i >= 0 and self._epochs[i] == epoch:
            return self._starts[i]
        return None

    def end_offset_for_epoch(self, epoch: int, log_end: int) -> OffsetAndEpoch:
        """For the largest epoch ≤ ``epoch`` in the log: its end offset (the next epoch's start,
        or ``log_end``) and that epoch. ``OffsetAndEpoch(0, 0)`` if there is none."""
        i = bisect_right(self._epochs, epoch) - 1
        if i < 0:
            return OffsetAndEpoch(0, 0)
        end = self._starts[i + 1] if i + 1 < len(self._starts) else log_end
        return OffsetAndEpoch(end, self._epochs[i])


def format_checkpoint(entries: list[tuple[int, int]]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines.extend(f"{epoch} {start}" for epoch, start in entries)
    return ("\n".join(lines) + "\n").encode("ascii")


def parse_checkpoint(data: bytes) -> list[tuple[int, int]]:
    """Parse ``leader-epoch-checkpoint``; ``ValueError`` naming the problem if malformed."""
    try:
        lines = data.decode("ascii").splitlines()
    except UnicodeDecodeError as exc:
        raise ValueError("not ASCII text") from exc
    if len(lines) < 2:
        raise ValueError("fewer than two lines")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise ValueError(f"unsupported version {lines[0].strip()!r}")
    try:
        count = int(lines[1])
    except ValueError as exc:
        raise ValueError(f"bad entry count {lines[1]!r}") from exc
    body = [line for line in lines[2:] if line.strip()]
    if count != len(body):
        raise ValueError(f"says {count} entries but has {len(body)}")
    entries: list[tuple[int, int]] = []
    for line in body:
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(f"bad line {line!r}")
        try:
            entries.append((int(fields[0]), int(fields[1])))
        except ValueError as exc:
            raise ValueError(f"bad line {line!r}") from exc
    for (e1, s1), (e2, s2) in pairwise(entries):
        if e2 <= e1 or s2 <= s1:
            raise ValueError(f"entries out of order: {e1} {s1} then {e2} {s2}")
    return entries
