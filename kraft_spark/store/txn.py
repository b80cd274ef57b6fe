"""Conditional writes (compare-and-set, transactions) as they travel in the log.

A conditional write is a group of consecutive records of one batch whose first record carries
the record header ``kraft.txn``: compact JSON ``{"n": <records in the group>, "if": [<condition>,
...]}``, a condition being ``{"key": k, "mod_offset": N}``, ``{"key": k, "version": N}`` or
``{"key": k, "exists": true|false}`` (keys as UTF-8 text). The group's writes take effect all
together or not at all.

**Where the conditions are judged.** Not by the node that takes the request, not by the leader
when it appends, but by every replica's state machine when it *applies* the group, against the
state of the committed log just before the group (``KeyValueState.apply``). So the outcome is a
pure function of the log prefix: every replica, every replay from the log and every replay from
a snapshot reach the same outcome, no condition is judged against state that lacks a committed
write, and none against a write that can still be truncated (only committed batches are
applied). A leader change in between cannot make a judgement stale: the group is judged where
it lands in the log, whoever appended it. This is etcd's choice too (a Txn is evaluated when
applied, not when proposed).

**One revision per group: its first offset.** A group that applies is one write request, so
every key it writes (puts and deletes) gets one revision, as etcd's Txn and DeleteRange do: the
group's *first* offset B (its last is L = B + n - 1). A key's ``mod_offset``/``create_offset``
(etcd's ``mod_revision``/``create_revision``), the MVCC history, watch events and snapshots all
carry B. Why the first and not the last:

* a watch from revision S reads the log from offset S and drops the events of a group that
  started before S (their revision is below S); with L, a watch from S inside a group would
  have to read back to the group's start, which offset S alone does not reveal;
* it is the ``base_offset`` the append answers, the one number a client of the HTTP API has
  for its write: a ``mod_offset`` condition on any key the group wrote uses it;
* a Range at a past revision R inside [B, L] sees the whole group, one before B none of it:
  never part of a group (a state holds whole batches, and a group never spans two);
* the header revision stays the last offset applied (L after the group): it is >= every
  revision the state holds, and the Txn's own answer carries B, the revision of its writes.
  The offsets B + 1 to L are revisions no write has: gaps, as control records leave.

Records of one multi-record append *without* ``kraft.txn`` are separate writes (as Kafka
offsets): each keeps its own offset as its revision. A lease revoked or expired deletes its
keys at the revision of its record.

A group whose header is malformed (not JSON, a wrong field, ``n`` out of the batch) fails as a
whole, deterministically; the HTTP API never writes such a header, and every way into the log
refuses one (``store.reserved_headers``), but a log written before that may hold one.

Semantics of each condition, as etcd's compare on ``mod_revision`` / ``version``:

* ``mod_offset = N``: the key is present and its last write is at offset N;
* ``version = N``: the key's version is N; version 0 means absent (a key's version counts its
  writes since it was last created: 1 after the creating write, reset by a delete);
* ``exists``: present (true) or absent (false);
* ``since = R`` with ``count = N`` (and ``range_end``, ``store.key_range``; empty: the key
  alone): the range holds exactly N keys and none was written at or after offset R, i.e. the
  range is as a read that saw N keys at offset R left it (a write since R would carry an offset
  >= R, a delete would lower the count). etcd's API (``kraft_spark.etcd``) writes it to apply
  a request only if everything it read is unchanged. Judging it walks every key (no ordered
  index), so it costs O(keys) on every replica.

A node that predates a condition kind judges a group using it malformed (it fails): every node
must run a version that knows the kinds in use before a client writes them (etcd's API).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kraft_spark.store.key_range import in_range

TXN_HEADER: Final = "kraft.txn"
# The header the Delta ``records`` table adds (not the log) to the rows of a failed group.
OUTCOME_HEADER: Final = "kraft.txn.outcome"
MAX_CONDITIONS: Final = 128


class Revision(Protocol):
    """What a condition reads of a live key (``state.machine.Entry``)."""

    @property
    def offset(self) -> int: ...

    @property
    def version(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Condition:
    """One condition on one key (or range); exactly one of mod_offset, version, exists,
    since is set (``count`` and ``range_end`` go with ``since``)."""

    key: bytes
    mod_offset: int | None = None
    version: int | None = None
    exists: bool | None = None
    since: int | None = None
    count: int = 0
    range_end: bytes = b""

    def __post_init__(self) -> None:
        given = sum(x is not None for x in (self.mod_offset, self.version, self.exists,
                                            self.since))
        if given != 1:
            raise ValueError("a condition names exactly one of mod_offset, version, exists, "
                             "since")
        if any(x is not None and x < 0 for x in (self.mod_offset, self.version, self.since)
               ) or self.count < 0:
            raise ValueError("mod_offset, version, since and count are >= 0")
        if self.since is None and (self.count or self.range_end):
            raise ValueError("count and range_end go with since")

    def holds(self, entry: Revision | None) -> bool:
        if self.exists is not None:
            return (entry is not None) == self.exists
        if self.version is not None:
            return (entry.version if entry is not None else 0) == self.version
        return entry is not None and entry.offset == self.mod_offset

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key.decode("utf-8", errors="surrogateescape")}
        if self.since is not None:
            out.update(since=self.since, count=self.count)
            if self.range_end:
                out["range_end"] = self.range_end.decode("utf-8", errors="surrogateescape")
        elif self.mod_offset is not None:
            out["mod_offset"] = self.mod_offset
        elif self.version is not None:
            out["version"] = self.version
        else:
            out["exists"] = self.exists
        return out

    @staticmethod
    def from_json(item: Any) -> Condition:
        """Raises ValueError naming what is wrong."""
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise ValueError("a condition is an object with a string key")
        unknown = set(item) - {"key", "mod_offset", "version", "exists", "since", "count",
                               "range_end"}
        if unknown:
            raise ValueError(f"unknown condition fields {sorted(unknown)}")
        for name in ("mod_offset", "version", "since", "count"):
            value = item.get(name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError(f"{name} is an integer")
        exists = item.get("exists")
        if exists is not None and not isinstance(exists, bool):
            raise ValueError("exists is true or false")
        range_end = item.get("range_end", "")
        if not isinstance(range_end, str):
            raise ValueError("range_end is a string")
        return Condition(item["key"].encode("utf-8", errors="surrogateescape"),
                         item.get("mod_offset"), item.get("version"), exists,
                         item.get("since"), item.get("count") or 0,
                         range_end.encode("utf-8", errors="surrogateescape"))


@dataclass(frozen=True, slots=True)
class Failure:
    """A key whose condition failed, with its revision when judged (0, 0 when absent)."""

    key: bytes
    mod_offset: int
    version: int


def encode_header(size: int, conditions: Sequence[Condition]) -> bytes:
    """The ``kraft.txn`` header value of a group of ``size`` records."""
    if size < 1:
        raise ValueError("a conditional write has at least one record")
    if len(conditions) > MAX_CONDITIONS:
        raise ValueError(f"at most {MAX_CONDITIONS} conditions per write")
    body = {"n": size, "if": [c.to_json() for c in conditions]}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", errors="surrogateescape")


def decode_header(raw: bytes | None) -> tuple[int, tuple[Condition, ...]]:
    """The group size and conditions of a ``kraft.txn`` header; ValueError if malformed."""
    if raw is None:
        raise ValueError("empty kraft.txn header")
    try:
        body = json.loads(raw.decode("utf-8", errors="surrogateescape"))
    except (ValueError, RecursionError) as exc:
        # RecursionError: JSON nested past the interpreter's depth. Any writer can send one
        # and every replica applies it: it must fail this group, not the state machine.
        raise ValueError(f"kraft.txn is not JSON: {exc}") from None
    if not isinstance(body, dict) or set(body) - {"n", "if"}:
        raise ValueError("kraft.txn is an object with fields n and if")
    size, items = body.get("n"), body.get("if", [])
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError("kraft.txn n is a positive integer")
    if not isinstance(items, list) or len(items) > MAX_CONDITIONS:
        raise ValueError(f"kraft.txn if is a list of at most {MAX_CONDITIONS} conditions")
    return size, tuple(Condition.from_json(item) for item in items)


def group_size(headers: Iterable[tuple[str, bytes | None]]) -> int:
    """How many records the conditional group starting at a record with ``headers`` holds: 0
    when it starts none, 1 when its ``kraft.txn`` header is malformed (that record alone, which
    failed). For readers of a batch the state machine judged already: a group that applied
    has a well-formed header (``decode_header`` checked the rest)."""
    for name, raw in headers:
        if name == TXN_HEADER:
            try:
                size = json.loads((raw or b"").decode("utf-8", errors="surrogateescape"))["n"]
            except (ValueError, RecursionError, TypeError, KeyError):
                return 1
            valid = isinstance(size, int) and not isinstance(size, bool) and size > 0
            return size if valid else 1
    return 0


def range_stats(items: Iterable[tuple[bytes, Revision]], start: bytes,
                end: bytes) -> tuple[int, int]:
    """The number of keys in the range and their highest ``offset`` (-1: none)."""
    count, highest = 0, -1
    for key, entry in items:
        if in_range(key, start, end):
            count += 1
            highest = max(highest, entry.offset)
    return count, highest


def judge(conditions: Sequence[Condition],
          lookup: Callable[[bytes], Revision | None],
          scan: Callable[[], Iterable[tuple[bytes, Revision]]] | None = None,
          ) -> tuple[Failure, ...]:
    """The conditions that fail against ``lookup`` (empty: the group applies); ``scan``: every
    live key, for the ``since`` conditions (without it they fail)."""
    failed: list[Failure] = []
    for condition in conditions:
        if condition.since is not None:
            count, highest = (range_stats(scan(), condition.key, condition.range_end)
                              if scan is not None else (-1, 0))
            if count != condition.count or highest >= condition.since:
                failed.append(Failure(condition.key, max(highest, 0), max(count, 0)))
            continue
        entry = lookup(condition.key)
        if not condition.holds(entry):
            failed.append(Failure(condition.key, entry.offset if entry else 0,
                                  entry.version if entry else 0))
    return tuple(failed)
