"""The committed history that watches must report, read from the voters' logs on disk, and the
checks of what each watcher received against it (etcd's watch validation,
``tests/robustness/validate/watch.go``: ordered, unique, reliable, atomic, resumable).

The history is the state machine's judgement over the log, as every node makes it:
``KeyValueState`` applies each batch, then ``batch_events`` turns it into watch events with the
state's failed conditional writes and each lease's deleted keys, exactly as
``kraft_spark.store.service.NodeStore`` does before it publishes to its watches.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraft_spark.raft.records import Batch
from kraft_spark.state.machine import KeyValueState
from kraft_spark.store.leases import LEASE_OP_HEADER, decode_op
from kraft_spark.store.watch_items import WatchEvent
from kraft_spark.store.watch_log import batch_events
from tests.integration.harness import read_voter_log

Point = tuple[int, int]  # (offset, index): an event's identity, or a watch's cursor


def _value(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Event:
    """One committed event as a watch reports it: ``(id, type, key, value)``."""

    offset: int
    index: int
    last: bool
    key: str
    value: Any

    @classmethod
    def of(cls, event: WatchEvent) -> Event:
        return cls(event.offset, event.index, event.last, event.key.decode(),
                   _value(event.value))

    @property
    def id(self) -> str:
        """As documented: ``N`` for the last event of offset N, ``N.M`` for the M-th before
        it (not ``watch_items.event_id``: the server's code, which this checks)."""
        return str(self.offset) if self.last else f"{self.offset}.{self.index}"

    @property
    def point(self) -> Point:
        return self.offset, self.index

    @property
    def kind(self) -> str:
        return "delete" if self.value is None else "put"

    def seen(self) -> tuple[str, str, str, Any]:
        return self.id, self.kind, self.key, self.value


@dataclass
class History:
    """Every event committed below ``end``, in (offset, index) order, with what made them."""

    events: list[Event]
    end: int
    lease_ops: Counter[str] = field(default_factory=Counter)
    # offset of a revoke / expiry -> the keys it deleted
    lease_deletes: dict[int, tuple[str, ...]] = field(default_factory=dict)
    failed_writes: int = 0
    data_records: int = 0

    def summary(self) -> str:
        multi = sum(1 for keys in self.lease_deletes.values() if len(keys) > 1)
        return (f"{len(self.events)} events below offset {self.end} from {self.data_records} "
                f"data records; {self.failed_writes} failed writes; lease ops "
                f"{dict(sorted(self.lease_ops.items()))}; {len(self.lease_deletes)} lease "
                f"deletions ({multi} of several keys)")


def committed_history(batches: list[Batch], end: int) -> History:
    """The events of ``batches`` (a voter's log from offset 0) below ``end``."""
    state = KeyValueState()
    history = History([], end)

    def failed_size(offset: int) -> int:
        failure = state.txn_failure(offset)
        return failure.size if failure is not None else 0

    for batch in batches:
        if batch.base_offset >= end:
            break
        state.apply(batch)  # raises on a gap or an overlap
        for event in batch_events(batch, failed_size, deleted_by=state.leases.deleted_at):
            if event.offset < end:
                history.events.append(Event.of(event))
        if batch.is_control:
            continue
        for i, record in enumerate(batch.records):
            offset = batch.base_offset + i
            history.data_records += 1
            failed = state.txn_failure(offset)
            ops = [decode_op(v) for k, v in record.headers if k == LEASE_OP_HEADER]
            if ops:
                deleted = state.leases.deleted_at(offset)
                outcome = "failed" if failed else "deleting" if deleted else "ok"
                history.lease_ops[f"{ops[0]['op']} {outcome}"] += 1
                if deleted:
                    history.lease_deletes[offset] = tuple(k.decode() for k in deleted)
            elif failed is not None:
                history.failed_writes += 1
    return history


def read_history(log_dirs: list[Path], end: int) -> tuple[History, list[str]]:
    """The history below ``end`` from the voters' logs on disk (they must agree on every batch
    below ``end`` that each holds, and one must hold them all); the problems found."""
    logs = [read_voter_log(d) for d in log_dirs]
    problems = []
    for d, batches in zip(log_dirs, logs, strict=True):
        if batches and batches[0].base_offset != 0:
            problems.append(f"{d}: the log starts at {batches[0].base_offset}, not 0 "
                            "(a snapshot truncated it): the history is incomplete")
    longest = max(logs, key=lambda b: b[-1].next_offset if b else 0)
    reach = longest[-1].next_offset if longest else 0
    if reach < end:
        problems.append(f"no voter's log reaches offset {end} (the longest ends at {reach})")

    def shape(batch: Batch) -> tuple[Any, ...]:
        return (batch.base_offset, batch.epoch, batch.is_control,
                [(r.key, r.value, r.headers) for r in batch.records])

    for d, batches in zip(log_dirs, logs, strict=True):
        for mine, theirs in zip(batches, longest, strict=False):
            if mine.base_offset >= end:
                break
            if shape(mine) != shape(theirs):
                problems.append(f"{d}: the batch at {mine.base_offset} (epoch {mine.epoch}) "
                                f"differs from another voter's (epoch {theirs.epoch}) below "
                                f"the committed offset {end}")
                break
    return committed_history(longest, end), problems


# ---- what a watcher received, and the checks


@dataclass(frozen=True)
class Received:
    """One item of a watch stream as its client read it."""

    kind: str  # put, delete, progress, cancelled
    id: str | None
    data: dict[str, Any]
    node: int
    conn: int  # the watcher's connection number

    def seen(self) -> tuple[str | None, str, str, Any]:
        return self.id, self.kind, self.data.get("key", ""), self.data.get("value")


@dataclass
class WatchLog:
    """What one watcher recorded: its filter, where it started, every item, its connections."""

    name: str
    key: str | None
    prefix: str | None
    start: Point | None = None
    items: list[Received] = field(default_factory=list)
    connections: list[str] = field(default_factory=list)

    def matches(self, key: str) -> bool:
        return key == self.key if self.key is not None else key.startswith(self.prefix or "")

    def events(self) -> list[Received]:
        return [i for i in self.items if i.kind in ("put", "delete")]


def point_after(event_id: str) -> Point:
    """Where a stream resumes after the event ``event_id``, as documented (docs/store-api.md):
    after ``N`` at offset N + 1, after ``N.M`` at the event M + 1 of offset N. Written out
    here rather than taken from the server's code, which it checks."""
    offset, dot, index = event_id.partition(".")
    return (int(offset), int(index) + 1) if dot else (int(offset) + 1, 0)


def cursor_after(item: Received) -> Point | None:
    """The point after ``item`` (None: it carries none)."""
    if item.kind == "cancelled":
        return None
    if item.id is None:  # a progress event at offset 0
        return (0, 0) if item.kind == "progress" else None
    return point_after(item.id)


def _show(items: list[Any], at: int, around: int = 3) -> str:
    lo, hi = max(0, at - around), min(len(items), at + around + 1)
    return "\n".join(f"    {'>' if i == at else ' '} [{i}] {items[i]}" for i in range(lo, hi))


def check_watch(log: WatchLog, history: History) -> tuple[int, list[str]]:
    """Compare what ``log``'s watcher received with the committed history filtered by its key
    or prefix, from its start to the last point it reached (an event's or a progress event's
    id): no event lost, none twice, in (offset, index) order, every delete of a lease's
    revocation or expiry there, with the ids every node gives. Returns (events checked,
    problems)."""
    if log.start is None:
        return 0, [f"{log.name}: never started (connections: {log.connections[-5:]})"]
    problems: list[str] = []
    order: list[str] = []  # items out of order (their count is reported beyond a few)
    cursor, end = log.start, log.start
    for n, item in enumerate(log.items):
        after = cursor_after(item)
        if item.kind in ("put", "delete"):
            if after is None or after <= cursor:
                order.append(f"{log.name}: item {n} {item.seen()} (connection {item.conn}, "
                                f"node {item.node}) is at or before the point {cursor} the "
                                "stream had already reached")
        elif after is not None and after < cursor:
            order.append(f"{log.name}: item {n}, a progress event {item.id} (connection "
                            f"{item.conn}, node {item.node}), goes back from {cursor}")
        if after is not None:
            cursor = max(cursor, after)
            end = max(end, after)
    expected = [e for e in history.events
                if log.matches(e.key) and log.start <= e.point < end]
    got = [i.seen() for i in log.events()]
    want = [e.seen() for e in expected]
    if got != want:
        at = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w),
                  min(len(got), len(want)))
        what = (f"{log.name} ({'key ' + repr(log.key) if log.key else 'prefix ' + repr(log.prefix)}"
                f", from {log.start} to {end}): {len(got)} events received, {len(want)} "
                f"committed; first divergence at event {at}")
        conn = len(log.connections)
        if at < len(got):
            item = log.events()[at]
            conn = item.conn
            what += f" (received on connection {item.conn}, node {item.node})"
            dup = [i for i, w in enumerate(want) if w == got[at]]
            if dup and dup[0] < at:
                what += f"; the received event is a duplicate of committed event {dup[0]}"
        if at < len(want):
            lost = want[at]
            if lost not in got:
                what += f"; committed event {lost} was never received"
            offset = expected[at].offset
            if offset in history.lease_deletes:
                keys = [k for k in history.lease_deletes[offset] if log.matches(k)]
                seen = [g[2] for g in got if g[0] is not None and g[0].split(".")[0] ==
                        str(offset)]
                what += (f"; offset {offset} is a lease's deletion of {keys} (received: "
                         f"{seen})")
        what += f"\n  received:\n{_show(got, at)}\n  committed:\n{_show(want, at)}"
        what += "\n  its connections up to there:\n" + "\n".join(
            f"    {c}" for c in log.connections[max(0, conn - 6):conn])
        problems.append(what)
    problems.extend(order[:3])
    if len(order) > 3:
        problems.append(f"{log.name}: {len(order) - 3} more items out of order")
    return len(got), problems


def check_agreement(logs: list[WatchLog]) -> list[str]:
    """Every watcher, whatever node served it, names each event with the same id."""
    ids: dict[tuple[int, str], tuple[str | None, str]] = {}
    problems: list[str] = []
    for log in logs:
        for item in log.events():
            where = (int(item.data.get("offset", -1)), str(item.data.get("key")))
            first = ids.setdefault(where, (item.id, log.name))
            if first[0] != item.id and len(problems) < 10:
                problems.append(f"offset {where[0]} key {where[1]!r}: id {first[0]!r} for "
                                f"{first[1]}, {item.id!r} for {log.name} (node {item.node})")
    return problems
