"""Exceptions of the storage layer.

Two sides, as the house rules ask: bytes that cannot be trusted (``CorruptRecordError``, raised
by the codec and by reads; a remote peer can cause it, so it never takes a node down by itself)
and misuse or environment problems of the local process (``LogError`` and its subclasses).
Every message names the file and, where it is known, the position and the offset, so a user can
find the damage with ``kraft-spark dump-log``.
"""

from __future__ import annotations


class CorruptRecordError(ValueError):
    """Bytes that are not a valid Kafka v2 record batch (bad length, magic, CRC or records).

    A ``ValueError`` so that callers decoding untrusted input need one ``except`` clause; the
    codec never lets ``IndexError``, ``struct.error`` or ``UnicodeDecodeError`` escape.
    """


class LogError(Exception):
    """A storage problem of the local node: misuse, a refused directory, a broken file."""


class CorruptSegmentError(CorruptRecordError, LogError):
    """A batch of a segment file that does not check out when read (bit rot in a sealed
    segment, whose index recovery trusted): where it is, for the repair that cuts the log
    there (``kraft_spark.net.log_repair``)."""

    def __init__(self, path: str, position: int, offset: int, detail: str) -> None:
        super().__init__(f"{path}: position {position} (offset {offset}): {detail}")
        self.path = path
        self.position = position
        self.offset = offset


class InvalidAppendError(LogError, ValueError):
    """An append that would break the log's invariants (offset gap, epoch going backwards)."""


class LogDirLockedError(LogError):
    """Another process holds the exclusive lock of the log directory."""


class NotFormattedError(LogError):
    """The log directory has no ``meta.properties``; it must be formatted first."""


class MetaPropertiesError(LogError):
    """``meta.properties`` is unreadable or belongs to another node or cluster."""


class QuorumStateError(LogError):
    """The ``quorum-state`` file exists but cannot be parsed, or a state to write is invalid."""
