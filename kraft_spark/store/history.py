"""A bounded in-memory MVCC history of the store: every key's revisions from a compaction
point on, as etcd's ``mvcc`` package keeps them (its ``keyIndex``: a key's revisions, a
deletion ending a generation, compaction keeping the last revision at or below the point).

A revision is a log offset (``kraft_spark.etcd.revision``): a record's, or for every write of
one conditional group the group's first offset (``kraft_spark.store.txn``); the state "at
revision r" is the state after every committed write of revision <= r took effect (a group
never partly: its revision is at or below r, or all its offsets are above r). The owner
(``WatchFeed``) feeds the writes that took effect, in (offset, index) order, exactly those the
watch feed publishes (a failed conditional write left out, a lease's deletes included), then
:meth:`advance` once per batch; a snapshot load :meth:`reset`\\ s it from the loaded state.

**What is held.** ``_keys`` maps each key to its chain of :class:`Revision`\\ s in offset order
(a tombstone, ``value`` None, where it was deleted), or to the state's ``Entry`` when the key
has not been written since the history started (its chain is that one live revision: an
``Entry`` is shared with the state machine, so the start costs one dict slot per live key, no
copies). Invariants, for every revision r >= :attr:`oldest`:

* a key absent from ``_keys`` is absent at r;
* a key's state at r is its chain's last revision at or below r (absent if that is a tombstone
  or there is none): every write after the chain's first revision is in the chain, and the
  first is at or below ``oldest`` unless the key did not exist before it.

**Bounded** by :meth:`compact`: revisions below the point are dropped except each key's last one
at or below it when live (a tombstone there is dropped with its whole chain). :meth:`advance`
compacts to ``revision - retention`` on its own: at most ``retention`` revisions (offsets) of
writes are kept, plus one per live key. ``_order`` lists the writes (offset, key) not yet
below the point, so compaction costs O(writes dropped), amortized O(1) per write.

**Deterministic.** Everything here is a pure function of the writes fed, the start and the
retention: two replicas fed the same log from the same start with the same retention hold the
same history and answer alike. Pure: no I/O, no clock, no asyncio; not thread-safe.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Final, NamedTuple

from kraft_spark.state.machine import Entry
from kraft_spark.store.key_range import in_range

__all__ = ["DEFAULT_RETENTION", "History", "Revision"]

# etcd's own auto-compaction is off by default; a bounded default keeps a node's memory
# bounded: about (200 bytes + the value) per retained revision (docs/etcd-api.md).
DEFAULT_RETENTION: Final = 100_000


class Revision(NamedTuple):
    """One write of a key: ``value`` None is a tombstone (the key deleted at ``mod``)."""

    mod: int
    value: bytes | None
    create: int
    version: int
    lease: int = 0


def _of_entry(entry: Entry) -> Revision:
    return Revision(entry.offset, entry.value, entry.create_offset, entry.version, entry.lease)


# A revision's ``mod`` (its first field), for bisect: a C-level key, not a Python call.
_mod: Callable[[Revision], int] = itemgetter(0)


class History:
    """The revisions of every key from :attr:`oldest` to :attr:`revision`."""

    __slots__ = ("_keys", "_order", "compacted", "retention", "revision", "start")

    def __init__(self, retention: int = DEFAULT_RETENTION) -> None:
        if retention < 1:
            raise ValueError(f"the history keeps at least 1 revision, got {retention}")
        self.retention = retention
        self._keys: dict[bytes, Entry | list[Revision]] = {}
        self._order: deque[tuple[int, bytes]] = deque()
        # etcd's compactMainRev: the highest point compacted to, by a Compact applied or by
        # retention (0: none yet). Reads and watch starts below it are "compacted".
        self.compacted = 0
        # The revision of the state the history started from (this node's start or its
        # snapshot): nothing older is known here.
        self.start = 0
        self.revision = 0  # the newest revision fed (the header revision)

    @property
    def oldest(self) -> int:
        """The lowest revision answered."""
        return max(self.compacted, self.start)

    def reset(self, entries: Iterable[tuple[bytes, Entry]], applied_offset: int) -> None:
        """Start over from a state that applied every offset below ``applied_offset`` (the
        ``Entry`` objects are kept, never changed: the state's entries are immutable)."""
        self._keys = dict(entries)
        self._order.clear()
        # ``compacted`` stays: a snapshot load answers nothing below its start (``oldest``).
        self.start = self.revision = max(applied_offset - 1, 0)

    def _chain(self, key: bytes) -> list[Revision] | None:
        held = self._keys.get(key)
        if isinstance(held, Entry):
            held = self._keys[key] = [_of_entry(held)]
        return held

    def _view(self, key: bytes) -> Sequence[Revision]:
        held = self._keys.get(key)
        if held is None:
            return ()
        return (_of_entry(held),) if isinstance(held, Entry) else held

    # ------------------------------------------------------------------ feeding

    def put(self, offset: int, key: bytes, value: bytes, lease: int = 0) -> Revision:
        """``key`` set at revision ``offset`` (revisions fed only grow; writes of one group
        share one)."""
        chain = self._chain(key)
        last = chain[-1] if chain else None
        if last is not None and last.value is not None:
            revision = Revision(offset, value, last.create, last.version + 1, lease)
        else:
            revision = Revision(offset, value, offset, 1, lease)
        if chain is None:
            self._keys[key] = [revision]
        else:
            chain.append(revision)
        self._order.append((offset, key))
        return revision

    def delete(self, offset: int, key: bytes) -> None:
        """``key`` deleted at ``offset``; nothing if it is absent (as the state machine)."""
        chain = self._chain(key)
        if not chain or chain[-1].value is None:
            return
        chain.append(Revision(offset, None, 0, 0))
        self._order.append((offset, key))

    def advance(self, applied_offset: int) -> None:
        """Every offset below ``applied_offset`` was fed: compacts to the retention."""
        self.revision = max(self.revision, applied_offset - 1)
        cut = self.revision - self.retention
        if cut > self.compacted:
            self.compact(cut)

    def compact(self, revision: int) -> None:
        """Drop what no read at or above ``revision`` needs; a point at or below the
        current one changes nothing, one above the newest revision stops there."""
        revision = min(revision, self.revision)
        if revision <= self.compacted:
            return
        self.compacted = revision
        order, keys = self._order, self._keys
        while order and order[0][0] <= revision:
            _, key = order.popleft()
            chain = keys.get(key)
            if not isinstance(chain, list) or (len(chain) == 1 and chain[0].value is not None):
                continue  # dropped already, or one live revision: nothing to drop
            # The key's last revision at or below the point stays, unless a tombstone.
            at = bisect.bisect_right(chain, revision, key=_mod) - 1
            if at < 0:
                continue
            if chain[at].value is None:
                del chain[:at + 1]
            elif at:
                del chain[:at]
            if not chain:
                del keys[key]

    # ------------------------------------------------------------------ reading

    def get(self, key: bytes, revision: int) -> Revision | None:
        """``key``'s live revision at ``revision`` (None: absent then). The caller checks
        ``oldest <= revision <= self.revision``."""
        chain = self._view(key)
        at = bisect.bisect_right(chain, revision, key=_mod) - 1
        if at < 0 or chain[at].value is None:
            return None
        return chain[at]

    def range(self, start: bytes, end: bytes, revision: int) -> list[tuple[bytes, Revision]]:
        """The live keys of the range at ``revision``, in key order (``end`` b"": ``start``
        alone, as etcd's ``range_end``)."""
        if not end:
            found = self.get(start, revision)
            return [(start, found)] if found is not None else []
        return sorted((k, r) for k, r in self.items(revision) if in_range(k, start, end))

    def items(self, revision: int) -> Iterator[tuple[bytes, Revision]]:
        """Every key live at ``revision``, in no order."""
        for key in list(self._keys):
            found = self.get(key, revision)
            if found is not None:
                yield key, found

    def written(self, key: bytes, revision: int,
                nth: int = 0) -> tuple[Revision | None, Revision | None]:
        """(the write of ``key`` at ``revision``, the live revision before it): None where not
        held (compacted, or before the history started; no previous: the key was absent).
        ``nth``: which of the key's writes at that revision (an HTTP conditional group may
        write one key twice; etcd's Txn never does)."""
        chain = self._view(key)
        at = bisect.bisect_left(chain, revision, key=_mod) + nth
        if at >= len(chain) or chain[at].mod != revision:
            return None, None
        before = chain[at - 1] if at > 0 else None
        return chain[at], before if before is not None and before.value is not None else None

    def __len__(self) -> int:
        """How many revisions are held (live keys never written since the start count one)."""
        return sum(1 if isinstance(held, Entry) else len(held) for held in self._keys.values())
