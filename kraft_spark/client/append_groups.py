"""How concurrent appends share batches, with no added delay: the rule behind ``AppendCoalescer``
(``coalesce.py``), which the client (appends sent to a leader as Produce requests) and the
embedded HTTP API (appends handed to the leader's own core) both run. Sans-I/O: it decides which
appends go together and settles them with their batch's outcome; its users do the sending.

An append goes out at once while fewer than ``max_in_flight`` batches are under way; appends
that arrive while every slot is busy wait, and the next free slot takes everything waiting as
**one** batch (up to ``BatchLimits``). So one client pays nothing and many clients share
batches in proportion to the load: Nagle's idea without the timer.

Invariants:

* each append's records stay contiguous and in order inside a shared batch, and a batch is
  appended atomically, so every append is all-or-nothing and gets consecutive offsets;
* every append sharing a batch gets that batch's outcome: its own slice of the offsets, or the
  same error (a commit timeout leaves all of them equally unknown; retrying under an
  idempotency key above this layer stays safe because the batch was one producer sequence);
* when a shared batch is refused for its content (too large, an invalid record), nothing was
  appended, so each of its appends goes again on its own, ahead of later arrivals (their
  order kept), and only a faulty one fails;
* an append whose caller gave up before it was sent (``PendingAppend.gone``) is not sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from kraft_spark.client.errors import InvalidRecordError, RecordTooLargeError
from kraft_spark.client.types import AppendResult, payload_bytes
from kraft_spark.raft.records import Record

DEFAULT_MAX_IN_FLIGHT: Final = 4
# Well under the quorum's default maximum batch size (1 MiB), so a shared batch is never
# refused for its size when each of its appends alone would have been accepted.
DEFAULT_MAX_BATCH_BYTES: Final = 256 * 1024
DEFAULT_MAX_BATCH_RECORDS: Final = 5000

# Told an append's outcome: (result, None) or (None, error). Called exactly once.
Settle = Callable[[AppendResult | None, BaseException | None], None]


def record_bytes(record: Record) -> int:
    """The record's payload plus ~16 bytes of per-record framing in a batch."""
    return payload_bytes(record.key, record.value, record.headers) + 16


class PendingAppend:
    """One append waiting for, or riding in, a batch."""

    __slots__ = ("alone", "records", "settle", "size", "timeout_s")

    def __init__(self, records: tuple[Record, ...], timeout_s: float, settle: Settle) -> None:
        self.records = records
        self.timeout_s = timeout_s
        self.settle = settle
        self.size = sum(record_bytes(r) for r in records)
        self.alone = False  # once part of a batch refused for its content: never grouped again

    def gone(self) -> bool:
        """True when nobody waits for the outcome any more (it is then not sent)."""
        return False


@dataclass(frozen=True)
class BatchLimits:
    """How large a shared batch may grow, in payload bytes and in records."""

    max_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_records: int = DEFAULT_MAX_BATCH_RECORDS

    def prefix(self, waiting: Sequence[PendingAppend]) -> int:
        """How many of ``waiting``, from the first, fit one batch: at least one (a lone append
        over the limits still goes alone; the leader judges it), never splitting one, and an
        append that must go alone only as the first and only one."""
        taken = size = count = 0
        for item in waiting:
            if taken and (item.alone or size + item.size > self.max_bytes
                          or count + len(item.records) > self.max_records):
                break
            taken += 1
            size += item.size
            count += len(item.records)
            if item.alone:
                break
        return taken


class AppendGroups:
    """The waiting appends and the batches under way (see the module docstring)."""

    def __init__(self, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 limits: BatchLimits | None = None) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.max_in_flight = max_in_flight
        self.limits = limits or BatchLimits()
        self.waiting: list[PendingAppend] = []
        self.in_flight = 0
        self.batches_sent = 0  # handed out, shared or not (for tests and metrics)
        self.appends_sent = 0

    @property
    def slot_free(self) -> bool:
        return self.in_flight < self.max_in_flight

    def add(self, item: PendingAppend) -> None:
        self.waiting.append(item)

    def next_group(self) -> list[PendingAppend] | None:
        """The next batch to send, taking a slot (give it back with ``done``); None when every
        slot is busy or nothing waits."""
        if not self.slot_free:
            return None
        if any(item.gone() for item in self.waiting):
            self.waiting = [item for item in self.waiting if not item.gone()]
        if not self.waiting:
            return None
        taken = self.limits.prefix(self.waiting)
        group, self.waiting = self.waiting[:taken], self.waiting[taken:]
        self.in_flight += 1
        self.batches_sent += 1
        self.appends_sent += len(group)
        return group

    def done(self, group: list[PendingAppend], result: AppendResult | None,
             error: BaseException | None) -> None:
        """The batch of ``group`` ended: its slot is free; each append gets its slice of
        ``result`` or ``error``, or goes back to wait alone when a shared batch was refused
        for its content."""
        self.in_flight -= 1
        if error is not None:
            if len(group) > 1 and isinstance(error, RecordTooLargeError | InvalidRecordError):
                for item in group:
                    item.alone = True
                self.waiting[:0] = group
                return
            for item in group:
                item.settle(None, error)
            return
        assert result is not None
        offset = result.base_offset
        for item in group:
            last = offset + len(item.records) - 1
            item.settle(AppendResult(offset, last, result.epoch), None)
            offset = last + 1

    def fail_waiting(self, error: BaseException) -> None:
        """Settle every append not yet sent with ``error`` (closing)."""
        waiting, self.waiting = self.waiting, []
        for item in waiting:
            item.settle(None, error)


def batch_of(group: Sequence[PendingAppend]) -> tuple[Record, ...]:
    """The records of a group, in order (a lone append's own tuple, not a copy)."""
    if len(group) == 1:
        return group[0].records
    return tuple(r for item in group for r in item.records)


def batch_timeout_s(group: Sequence[PendingAppend]) -> float:
    """A shared batch waits as long as its most patient append."""
    return max(item.timeout_s for item in group)
