"""etcd's Maintenance service beyond Status (``api.etcd.cluster``): Alarm, Hash, HashKV,
Snapshot, Defragment and MoveLeader.

* **HashKV** hashes the key-value state at a revision (crc32 Castagnoli, as etcd's): every
  key live there, in key order, as the ``mvccpb.KeyValue`` a Range returns (key, create and
  mod revision, version, value, lease), serialized deterministically. Revisions are log
  offsets and the state at one is a pure function of the log, so every replica that can
  answer a revision gives the same hash; past revisions come from the MVCC history
  (``kraft_spark.store.history``), below it ``ErrCompacted``, above the current one
  ``ErrFutureRev``. etcd hashes the revisions its backend keeps (history included), which
  depend on when each member compacted; the state at a revision does not. **Hash** is HashKV
  at the current revision.
* **Snapshot** streams a snapshot of this node's state machine as applied now, in the node's
  own snapshot format (``kraft_spark.state.snapshot_file``, Kafka's KIP-630 batches), padded
  with zeros to a multiple of 512 bytes (etcd's clients take a stream whose size is not a
  multiple of 512 plus 32 as truncated), then the sha256 of everything before it, as etcd
  appends one to its bbolt stream. It is encoded
  in memory first (etcd streams a bbolt file of the same order of size), so it needs about
  the state's size in memory for as long as the client takes to read it.
* **Alarm**: GET answers the node's own alarm, NOSPACE when its log directory failed with a
  full disk (``kraft_spark.net.storage_failure``: the node is then stopping, exit 74, so the
  answer is only seen by calls already in flight); nothing else raises alarms here. There is
  no replicated alarm store: DEACTIVATE finds nothing to disarm and answers with no alarm,
  as etcd does for an alarm that is not active; ACTIVATE of NONE answers nothing (etcd's
  too); ACTIVATE of NOSPACE or CORRUPT is refused (UNIMPLEMENTED, saying why).
* **Defragment** answers OK at once: there is no bbolt file whose free pages could be given
  back; the log's segments are deleted whole by retention after each snapshot.
* **MoveLeader** is UNIMPLEMENTED: the only leader hand-over here is a leader's graceful stop
  (EndQuorumEpoch naming its successors by how caught up they are), with no way to name the
  next leader (Kafka's KRaft has none either).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import crc32c

from api.etcd.cluster import ClusterServicer
from api.etcd.context import EtcdContext
from kraft_spark.etcd import errors
from kraft_spark.etcd.kv import View, at_revision, key_value
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.state.machine import KeyValueState
from kraft_spark.state.snapshot_file import encode_snapshot

# etcd's snapshot stream sends the database in blobs of this size.
SNAPSHOT_CHUNK: Final = 32 * 1024
# etcd's clients check that a snapshot is whole by its size: a multiple of this (bbolt's pages
# are) plus the sha256 (clientv3's ``hasChecksum``); the file is padded with zeros to it.
SNAPSHOT_ALIGN: Final = 512
# A disk that is full, as ``storage_failure`` names the errnos (etcd's NOSPACE alarm).
_FULL_DISK: Final = ("ENOSPC", "EDQUOT")


def state_hash(view: View) -> int:
    """crc32c of the live keys of ``view`` in key order, each as its ``mvccpb.KeyValue``."""
    digest = 0
    for key, entry in sorted(view.items(), key=lambda item: item[0]):
        digest = crc32c.crc32c(key_value(key, entry).SerializeToString(deterministic=True),
                               digest)
    return digest


def snapshot_bytes(state: KeyValueState) -> Iterator[bytes]:
    """``state`` as a snapshot file's bytes, batch by batch (what the node's snapshot writer
    would write now). What it holds is taken when the first batch (the header) is asked for:
    do that on the loop (the entries are immutable, their dict is copied); the rest may be
    encoded on any thread."""
    outcomes_from, failed, leases = state.outcomes_to_store()
    batches = encode_snapshot(
        OffsetAndEpoch(state.applied_offset, state.applied_epoch), state.copy_entries().items(),
        state.producers.export(), int(time.time() * 1000), state.voters,
        failed_txns=failed, leases=leases, outcomes_from=outcomes_from)
    for batch in batches:
        yield batch
        time.sleep(0)  # let the loop's thread have the GIL between batches (as the writer)


class MaintenanceServicer:
    def __init__(self, ctx: EtcdContext, cluster: ClusterServicer) -> None:
        self._ctx = ctx
        self._cluster = cluster

    async def Status(self, request: rpc_pb2.StatusRequest, context: Any,
                     identity: object) -> rpc_pb2.StatusResponse:
        return await self._cluster.Status(request, context, identity)

    def _disk_full(self) -> bool:
        failure = self._ctx.node.describe().get("storage_failure")
        return bool(failure) and any(name in str(failure) for name in _FULL_DISK)

    async def Alarm(self, request: rpc_pb2.AlarmRequest, _context: Any,
                    _identity: object) -> rpc_pb2.AlarmResponse:
        ctx = self._ctx
        response = rpc_pb2.AlarmResponse(header=ctx.header())
        if request.action == rpc_pb2.AlarmRequest.GET:
            if self._disk_full() and request.alarm in (rpc_pb2.NONE, rpc_pb2.NOSPACE):
                response.alarms.append(rpc_pb2.AlarmMember(memberID=ctx.member_id,
                                                           alarm=rpc_pb2.NOSPACE))
        elif request.action == rpc_pb2.AlarmRequest.ACTIVATE and request.alarm != rpc_pb2.NONE:
            raise errors.EtcdError(
                "UNIMPLEMENTED", "kraft-spark: alarms are raised by the nodes themselves (a "
                "full disk stops the node); there is no replicated alarm store to activate one "
                "in (see docs/etcd-api.md)")
        return response

    async def HashKV(self, request: rpc_pb2.HashKVRequest, _context: Any,
                     _identity: object) -> rpc_pb2.HashKVResponse:
        ctx = self._ctx
        current = ctx.view()
        view = at_revision(current, request.revision)
        history = ctx.store.history
        return rpc_pb2.HashKVResponse(
            header=ctx.header(current.revision), hash=state_hash(view),
            compact_revision=history.compacted, hash_revision=view.revision)

    async def Hash(self, _request: rpc_pb2.HashRequest, _context: Any,
                   _identity: object) -> rpc_pb2.HashResponse:
        view = self._ctx.view()
        return rpc_pb2.HashResponse(header=self._ctx.header(view.revision),
                                    hash=state_hash(view))

    async def Snapshot(self, _request: rpc_pb2.SnapshotRequest, _context: Any,
                       _identity: object) -> AsyncIterator[rpc_pb2.SnapshotResponse]:
        ctx = self._ctx
        state = ctx.store.applied_state()
        revision = ctx.header().revision
        batches = snapshot_bytes(state)  # one view, taken before the first await
        header_batch = next(batches)
        data = header_batch + await asyncio.to_thread(b"".join, batches)
        data += bytes(-len(data) % SNAPSHOT_ALIGN)
        header = ctx.header(revision)
        total = len(data)
        for start in range(0, total, SNAPSHOT_CHUNK):
            blob = data[start:start + SNAPSHOT_CHUNK]
            yield rpc_pb2.SnapshotResponse(header=header, blob=blob,
                                           remaining_bytes=total - start - len(blob))
        yield rpc_pb2.SnapshotResponse(header=header, blob=hashlib.sha256(data).digest(),
                                       remaining_bytes=0)

    async def Defragment(self, _request: rpc_pb2.DefragmentRequest, _context: Any,
                         _identity: object) -> rpc_pb2.DefragmentResponse:
        return rpc_pb2.DefragmentResponse(header=self._ctx.header())

    async def MoveLeader(self, _request: rpc_pb2.MoveLeaderRequest, _context: Any,
                         _identity: object) -> rpc_pb2.MoveLeaderResponse:
        raise errors.EtcdError(
            "UNIMPLEMENTED", "kraft-spark: MoveLeader is not supported: a leader hands over "
            "only when it stops (EndQuorumEpoch, to the voters most caught up), with no way to "
            "name the next leader; stop the leader's process to move leadership")
