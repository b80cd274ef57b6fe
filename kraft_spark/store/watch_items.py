"""What a watch reports, and where it resumes: the items of a ``Watcher``'s stream
(``kraft_spark.store.watch``) and the resumable ids of its events.

An event is identified by ``(offset, index)``: one offset may hold several events (a lease
revoked or expired there deletes each of its keys), numbered from 0 in the same order on every
node. :func:`event_id` is the id an HTTP stream sends (``"42"`` for the last, usually the only,
event of offset 42; ``"42.0"``, ``"42.1"``... for the ones before it); :func:`parse_event_id`
turns an id back into the point after it, :func:`resume_id` a point into the id that reaches
it. Pure data: no asyncio, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BelowLogStart",
    "Cancelled",
    "Progress",
    "WatchEvent",
    "WatchHubClosed",
    "WatchItem",
    "describe_resume_point",
    "event_id",
    "parse_event_id",
    "resume_id",
]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A committed write: ``value`` None is a delete.

    One offset may hold several events (a lease revoked or expired there deletes each of its
    keys): ``index`` numbers them from 0 in key order, the same on every node (the state's
    deleted keys are sorted), and ``last`` marks the final one. ``(offset, index)`` is the
    event's identity: :func:`event_id` is its resumable form.

    ``group``: the first offset of the conditional group the write belongs to when that is not
    ``offset`` (None otherwise): the write's :attr:`revision` (``kraft_spark.store.txn``)."""

    offset: int
    key: bytes
    value: bytes | None
    index: int = 0
    last: bool = True
    group: int | None = None

    @property
    def revision(self) -> int:
        """etcd's ``mod_revision`` of the write: shared by every write of one group."""
        return self.offset if self.group is None else self.group


@dataclass(frozen=True, slots=True)
class Progress:
    """Everything before ``(offset, index)`` has been reported: the watch resumes there
    (``index`` > 0 only when the watch stopped between the events of one offset)."""

    offset: int
    index: int = 0


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The watch ended for ``reason``; a new watch from ``(resume_offset, resume_index)``
    continues it (:func:`resume_id`: the same point as a ``Last-Event-ID``)."""

    reason: str
    resume_offset: int
    resume_index: int = 0


WatchItem = WatchEvent | Progress | Cancelled


class BelowLogStart(Exception):
    """The offset asked for is below the log start: retention deleted those records after
    ``snapshot`` (``<end offset>-<epoch>``; None if unknown) captured their effect."""

    def __init__(self, from_offset: int, log_start_offset: int, snapshot: str | None) -> None:
        self.from_offset = from_offset
        self.log_start_offset = log_start_offset
        self.snapshot = snapshot
        where = (f"load snapshot {snapshot} first (it holds every key's state up to offset "
                 f"{log_start_offset})") if snapshot else (
                 f"load the newest snapshot first (the state up to offset {log_start_offset})")
        super().__init__(
            f"offset {from_offset} is below the log start offset {log_start_offset}: "
            f"retention deleted those records; {where}, then watch from offset "
            f"{log_start_offset}"
        )


def event_id(event: WatchEvent) -> str:
    """The event's resumable id: ``"42"`` for the last (usually the only) event of offset 42,
    ``"42.0"``, ``"42.1"``... for the events before it at the same offset. Resuming after
    ``"42"`` continues at offset 43; after ``"42.1"`` at the third event of offset 42."""
    return str(event.offset) if event.last else f"{event.offset}.{event.index}"


def resume_id(offset: int, index: int = 0) -> str | None:
    """The id whose resumption continues at ``(offset, index)`` (None: from offset 0, no id)."""
    if index:
        return f"{offset}.{index - 1}"
    return str(offset - 1) if offset > 0 else None


def parse_event_id(text: str, max_offset: int = 2**63 - 1) -> tuple[int, int]:
    """Where a watch resumes after the event ``text`` (``"N"`` or ``"N.M"``): ``(offset,
    index)``. Raises ValueError naming the expected form."""
    offset_text, dot, index_text = text.strip().partition(".")
    if not (offset_text.isascii() and offset_text.isdigit()) or (
            dot and not (index_text.isascii() and index_text.isdigit())):
        raise ValueError(f"an event id is an offset N or N.M (the M-th event of offset N), "
                         f"got {text[:40]!r}")
    offset = int(offset_text)
    if offset >= max_offset or (dot and int(index_text) >= 2**31):
        raise ValueError(f"event id {text[:40]!r} is out of range (offsets 0 to "
                         f"{max_offset - 1})")
    return (offset, int(index_text) + 1) if dot else (offset + 1, 0)


class WatchHubClosed(RuntimeError):
    """The hub was closed (its node is stopping): watch through another node."""


def describe_resume_point(offset: int, index: int) -> str:
    """A resume point in words, with the ``Last-Event-ID`` that reaches it."""
    last_id = resume_id(offset, index)
    if last_id is None:
        return "offset 0"
    if index:
        return f"event {index} of offset {offset} (Last-Event-ID: {last_id})"
    return f"offset {offset} (from_offset={offset}, or Last-Event-ID: {last_id})"
