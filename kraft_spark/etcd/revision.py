"""How etcd's revisions map onto the log (issue 64).

**A revision is a log offset: one per write request.** A request's writes share one revision,
the offset of its first record: a Put's own record, and every put and delete of a Txn or a
DeleteRange (one conditional group, ``kraft_spark.store.txn``, which says why the first offset
and not the last). A key's ``mod_revision`` is the revision of the request that last wrote it
(``Entry.offset``, the HTTP API's ``mod_offset``), its ``create_revision`` that of the request
that created it (``create_offset``), its ``version`` the state machine's. A lease revoked or
expired deletes its keys at the offset of its record. The state machine, the MVCC history, the
watch events and the snapshots all derive them from the log alike, so revisions only grow,
every replica and every replay (from the log or from a snapshot) give the same ones, and a key
written over gRPC reads over HTTP with ``mod_offset == mod_revision``, and the reverse.

The store-wide revision a response header carries is the last offset the answering state has
applied (``applied_offset - 1``): every committed write at or below it is visible, none above.
A write request's response carries its own revision instead, as etcd's does (below the
node's header revision when the group had more than one record). Offset 0 is always a control
record (the first leader's LeaderChange), so no key has revision 0, which etcd reserves for
"absent".

**Where this differs from etcd:**

* etcd's revision grows by exactly one per write request. Here it is the request's first
  offset: records that change no key (control records, lease grants and keep-alives, the
  records of a failed conditional write, a group's records after its first) leave gaps, and a
  keep-alive moves the header revision where etcd's would not.
* Records of one multi-record HTTP append that is not a conditional group are separate writes
  (as Kafka offsets): one revision each.
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
