"""etcd's Watch service: one bidirectional stream carries many watches, each a ``Watcher`` of
the node's ``WatchHub`` (``kraft_spark.store.watch``), their events multiplexed in the order
each watch yields them.

Per watch: ``key`` / ``range_end`` (a key, a prefix, from-key, or any range: watched through
its narrowest prefix, filtered by ``in_range``), ``start_revision`` (the log offset to read
from, dropping the rest of a conditional group begun before it, whose revision is below it;
0: from now), ``filters`` (NOPUT, NODELETE), ``progress_notify`` (the hub's progress
items, every few seconds while idle). A start the log no longer holds answers
``compact_revision`` (the log start) and cancels, as etcd does below its compaction; so does a
start below the MVCC history's compaction point (``History.compacted``: Compact and
retention, the same on every replica). A progress request answers the current revision
(``watch_id`` -1, as etcd 3.5).

Events carry ``mod_revision`` (the write's revision: its offset, or its conditional group's
first offset, ``kraft_spark.store.txn``; the events of one revision go in one response, as
etcd sends a Txn's), ``create_revision``, ``version`` and
``lease`` from the history (``kraft_spark.store.history``), and with ``prev_kv`` the key's
previous value; when the history no longer holds that write (compacted since, or older than
this node's start), ``create_revision``/``version`` come from the key if it still holds that
write (else 0), and ``prev_kv`` is omitted, as etcd omits it once compacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

from api.etcd.context import EtcdContext
from api.etcd.permissions import check_read
from kraft_spark.etcd import errors
from kraft_spark.etcd.pb import kv_pb2, rpc_pb2
from kraft_spark.etcd.revision import header_revision
from kraft_spark.store.key_range import in_range, watch_prefix
from kraft_spark.store.watch import (
    BelowLogStart,
    Cancelled,
    Progress,
    Watcher,
    WatchEvent,
    WatchHubClosed,
    WatchItem,
)

Create = rpc_pb2.WatchCreateRequest


class WatchServicer:
    def __init__(self, ctx: EtcdContext) -> None:
        self._ctx = ctx

    async def Watch(self, requests: AsyncIterator[rpc_pb2.WatchRequest], _context: Any,
                    identity: object) -> AsyncIterator[rpc_pb2.WatchResponse]:
        stream = _Stream(self._ctx, identity)
        reader = asyncio.get_running_loop().create_task(stream.read(requests))
        try:
            while True:
                item = await stream.out.get()
                if item is None:
                    return
                yield item
        finally:
            reader.cancel()
            await stream.close()


class _Stream:
    """The watches of one stream; responses go to ``out`` (None: the stream ends)."""

    def __init__(self, ctx: EtcdContext, caller: object) -> None:
        self._ctx = ctx
        self._caller = caller
        self.out: asyncio.Queue[rpc_pb2.WatchResponse | None] = asyncio.Queue()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._ids = itertools.count()

    async def read(self, requests: AsyncIterator[rpc_pb2.WatchRequest]) -> None:
        try:
            async for request in requests:
                kind = request.WhichOneof("request_union")
                if kind == "create_request":
                    self._create(request.create_request)
                elif kind == "cancel_request":
                    await self._cancel(request.cancel_request.watch_id)
                elif kind == "progress_request":
                    self.out.put_nowait(rpc_pb2.WatchResponse(header=self._ctx.header(),
                                                              watch_id=-1))
        finally:
            self.out.put_nowait(None)

    def _create(self, create: rpc_pb2.WatchCreateRequest) -> None:
        header = self._ctx.header()
        try:
            check_read(self._caller, create.key, create.range_end)
        except errors.EtcdError as exc:  # etcd's isWatchPermitted: created, cancelled, id -1
            self.out.put_nowait(rpc_pb2.WatchResponse(
                header=header, watch_id=-1, created=True, canceled=True,
                cancel_reason=f"rpc error: code = PermissionDenied desc = {exc.message}"))
            return
        watch_id = create.watch_id if create.watch_id > 0 else next(self._ids)
        compacted = self._ctx.store.history.compacted
        if 0 < create.start_revision < compacted:
            # etcd's contract: created, then cancelled with the compaction point.
            self.out.put_nowait(rpc_pb2.WatchResponse(
                header=header, watch_id=watch_id, created=True, canceled=True,
                compact_revision=compacted,
                cancel_reason="etcdserver: mvcc: required revision has been compacted"))
            return
        hub = self._ctx.store.watch_hub()
        prefix = watch_prefix(create.key, create.range_end)
        try:
            if hub is None:
                raise WatchHubClosed("this node serves no watches")
            watcher = hub.watch(key=create.key if prefix is None else None, prefix=prefix,
                                from_offset=create.start_revision or None)
        except (WatchHubClosed, ValueError) as exc:
            self.out.put_nowait(rpc_pb2.WatchResponse(
                header=header, watch_id=watch_id, created=True, canceled=True,
                cancel_reason=str(exc)))
            return
        self._tasks[watch_id] = asyncio.get_running_loop().create_task(
            self._run(watch_id, create, watcher, header))

    async def _cancel(self, watch_id: int) -> None:
        task = self._tasks.pop(watch_id, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.out.put_nowait(rpc_pb2.WatchResponse(header=self._ctx.header(),
                                                  watch_id=watch_id, canceled=True))

    async def _run(self, watch_id: int, create: rpc_pb2.WatchCreateRequest, watcher: Watcher,
                   header: rpc_pb2.ResponseHeader) -> None:
        ctx, out = self._ctx, self.out
        no_put = Create.NOPUT in create.filters
        no_delete = Create.NODELETE in create.filters
        async with watcher:
            try:
                await watcher.start()
            except BelowLogStart as exc:
                out.put_nowait(rpc_pb2.WatchResponse(
                    header=header, watch_id=watch_id, created=True, canceled=True,
                    compact_revision=exc.log_start_offset,
                    cancel_reason="etcdserver: mvcc: required revision has been compacted"))
                return
            out.put_nowait(rpc_pb2.WatchResponse(header=header, watch_id=watch_id,
                                                 created=True))

            def wanted(event: WatchEvent) -> bool:
                # The log is read from offset start_revision: the rest of a group that began
                # before it is at a revision below it.
                return (event.revision >= create.start_revision
                        and not (no_delete if event.value is None else no_put)
                        and in_range(event.key, create.key, create.range_end or b""))

            pending: WatchItem | None = None
            while True:
                if pending is not None:
                    item, pending = pending, None
                else:
                    try:
                        item = await anext(watcher)
                    except StopAsyncIteration:
                        return
                if isinstance(item, WatchEvent):
                    # One response per revision, as etcd's: the writes of one group were
                    # published together, so they are all ready now (Watcher.poll).
                    revision, events = item.revision, []
                    seen: dict[bytes, int] = {}  # the key's writes so far at this revision
                    while True:
                        nth = seen[item.key] = seen.get(item.key, -1) + 1
                        if wanted(item):
                            events.append(self._event(item, create.prev_kv, nth))
                        following = watcher.poll()
                        if not (isinstance(following, WatchEvent)
                                and following.revision == revision):
                            pending = following
                            break
                        item = following
                    if events:
                        out.put_nowait(rpc_pb2.WatchResponse(
                            header=ctx.header(revision), watch_id=watch_id, events=events))
                elif isinstance(item, Progress):
                    if create.progress_notify:
                        out.put_nowait(rpc_pb2.WatchResponse(
                            header=ctx.header(header_revision(item.offset)),
                            watch_id=watch_id))
                elif isinstance(item, Cancelled):
                    out.put_nowait(rpc_pb2.WatchResponse(
                        header=ctx.header(), watch_id=watch_id, canceled=True,
                        cancel_reason=f"kraft-spark: {item.reason}; watch again from "
                                      f"revision {item.resume_offset}"))
                    return

    def _event(self, item: WatchEvent, prev_kv: bool, nth: int) -> kv_pb2.Event:
        event = kv_pb2.Event(type=kv_pb2.Event.PUT)
        kv = event.kv  # (a protobuf field: set in place, a message given is copied)
        kv.key, kv.mod_revision = item.key, item.revision
        written, before = self._ctx.store.history.written(item.key, item.revision, nth)
        if prev_kv and before is not None and before.value is not None:
            event.prev_kv.CopyFrom(kv_pb2.KeyValue(
                key=item.key, create_revision=before.create, mod_revision=before.mod,
                version=before.version, value=before.value, lease=before.lease))
        if item.value is None:
            event.type = kv_pb2.Event.DELETE
            return event
        kv.value = item.value
        if written is not None:
            kv.create_revision, kv.version, kv.lease = (written.create, written.version,
                                                        written.lease)
            return event
        entry = self._ctx.store.applied_state().get(item.key)
        if entry is not None and entry.offset == item.revision:
            kv.create_revision, kv.version, kv.lease = (entry.create_offset, entry.version,
                                                        entry.lease)
        return event

    async def close(self) -> None:
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
