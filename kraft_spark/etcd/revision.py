"""How etcd's revisions map onto the log (phase 1 of issue 64).

**A revision is a log offset.** A key's ``mod_revision`` is the offset of the record that last
wrote it (``Entry.offset``, the HTTP API's ``mod_offset``), its ``create_revision`` the offset
of the write that created it (``create_offset``), its ``version`` the state machine's. The
store-wide revision a response header carries is the last offset the answering state has
applied (``applied_offset - 1``): every committed write at or below it is visible, none above.
So revisions only grow, every replica and every replay from a snapshot give the same ones (the
log is the same), and a key written over gRPC reads over HTTP with ``mod_offset ==
mod_revision`` and the reverse. Offset 0 is always a control record (the first leader's
LeaderChange), so no key has revision 0, which etcd reserves for "absent".

**Where this differs from etcd, on purpose, until phase 2:**

* etcd's revision grows by exactly one per write request. Here it grows by one per *record*,
  and records that change no key (control records, lease grants and keep-alives, the records
  of a failed conditional write) move it too: revisions have gaps, and a keep-alive moves the
  header revision where etcd's would not.
* etcd gives every write of one Txn (and every delete of one DeleteRange) one shared revision.
  Here a request's writes are one conditional group at consecutive offsets, applied all or none
  (``kraft_spark.store.txn``), each key's ``mod_revision`` the offset of its own record; the
  response header carries the group's *last* offset, so every key the request wrote has
  ``mod_revision`` <= the header's revision, as in etcd. Sharing one revision would change the
  state machine's ``mod_offset`` for multi-record HTTP writes too (phase 2 decides that with
  the Delta columns).
* Past revisions come from a bounded in-memory history (``kraft_spark.store.history``): a
  read below what it holds fails as etcd's does below its compaction point (``ErrCompacted``),
  a later one than the current with ``ErrFutureRev``; a watch may start at any revision at or
  above the compaction point that the log still holds.

``member_id`` / ``cluster_id`` are etcd's uint64 ids, derived stably from kraft-spark's ids.
"""

from __future__ import annotations

import hashlib


def header_revision(applied_offset: int) -> int:
    """The store-wide revision of a state that applied every offset below ``applied_offset``."""
    return max(applied_offset - 1, 0)


def _uint64(text: str) -> int:
    # 63 bits: etcdctl prints ids as unsigned hex, some clients parse them as int64.
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1 or 1


def cluster_number(cluster_id: str) -> int:
    """etcd's ``cluster_id`` for kraft-spark's cluster id (stable, never 0)."""
    return _uint64(f"cluster:{cluster_id}")


def member_number(cluster_id: str, node_id: int) -> int:
    """etcd's ``member_id`` of node ``node_id`` (stable, distinct per node, never 0)."""
    return _uint64(f"member:{cluster_id}:{node_id}")
