"""Every call of etcd's v3 API, forwarded as bytes: a generic gRPC handler whose methods
take and give the messages undecoded (no serializers), with the caller's metadata (``token``,
``authorization``...) and deadline passed on and the node's metadata, status and details passed
back. The method's kind (unary or streaming, each side) comes from etcd's descriptors; a method
they do not name is forwarded as a bidirectional stream, which every kind is on the wire.

Failover, as etcd's gRPC proxy (its clientv3 underneath) does it:

* a call goes to the first node of ``Upstreams.candidates()`` that can be reached; one whose
  connection cannot be made (refused, or not ready in ``CONNECT_S``) is skipped: nothing was
  sent to it;
* a unary call answered UNAVAILABLE is sent again to the next node when it was never sent
  (grpc's "failed to connect") or when it changes nothing (``IMMUTABLE``: reads, as clientv3's
  retry interceptor retries only those); a write that may have reached a node is not repeated:
  its UNAVAILABLE goes to the caller, whose client decides, as with etcd;
* a stream answered UNAVAILABLE before anything of it was relayed to the caller is opened
  again on the next node and given every message the caller sent so far (a Watch's create,
  a keep-alive: nothing the caller has seen an answer to); once an answer went through, the
  stream ends with the node's status and the caller's client resumes (clientv3 restarts its
  watches from the last revision it saw, and its keep-alives).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any, Final

import grpc

from kraft_spark.etcd_front.upstreams import Upstream, Upstreams

CONNECT_S: Final = 1.0
# What clientv3's retry interceptor repeats on any UNAVAILABLE (``isSafeRetryImmutableRPC``):
# calls that change nothing.
IMMUTABLE: Final = frozenset({
    "/etcdserverpb.KV/Range", "/etcdserverpb.Lease/LeaseTimeToLive",
    "/etcdserverpb.Lease/LeaseLeases", "/etcdserverpb.Cluster/MemberList",
    "/etcdserverpb.Maintenance/Status", "/etcdserverpb.Maintenance/Hash",
    "/etcdserverpb.Maintenance/HashKV", "/etcdserverpb.Auth/Authenticate",
    "/etcdserverpb.Auth/AuthStatus", "/etcdserverpb.Auth/UserGet",
    "/etcdserverpb.Auth/UserList", "/etcdserverpb.Auth/RoleGet",
    "/etcdserverpb.Auth/RoleList", "/v3electionpb.Election/Leader",
})
# Metadata grpc sets on each hop itself (and refuses from the application).
_HOP_KEYS: Final = frozenset({"content-type", "te", "user-agent", "host"})
NEVER_SENT: Final = "failed to connect to all addresses"
# What writing to a call that has ended raises.
_ENDED: Final = (grpc.aio.AioRpcError, asyncio.InvalidStateError)


def method_kinds() -> dict[str, tuple[bool, bool]]:
    """``/package.Service/Method`` -> (client streams, server streams), for etcd's services."""
    from kraft_spark.etcd.pb import rpc_pb2, v3election_pb2, v3lock_pb2

    kinds = {}
    for module in (rpc_pb2, v3lock_pb2, v3election_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                kinds[f"/{service.full_name}/{m.name}"] = (m.client_streaming,
                                                           m.server_streaming)
    return kinds


def passed_on(metadata: Iterable[Any] | None) -> tuple[tuple[str, Any], ...]:
    """The metadata of one hop that belongs to the next: the caller's own keys."""
    return tuple((k, v) for k, v in metadata or ()
                 if not k.startswith((":", "grpc-")) and k not in _HOP_KEYS)


async def reachable(node: Upstream) -> bool:
    """Whether the node's connection is up (made now if needed, within ``CONNECT_S``)."""
    channel = node.channel
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CONNECT_S
    state = channel.get_state(try_to_connect=True)
    while state != grpc.ChannelConnectivity.READY:
        remaining = deadline - loop.time()
        if state in (grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                     grpc.ChannelConnectivity.SHUTDOWN) or remaining <= 0:
            return False
        try:
            await asyncio.wait_for(channel.wait_for_state_change(state), remaining)
        except TimeoutError:
            return False
        state = channel.get_state(try_to_connect=True)
    return True


def _broke(node: Upstream) -> bool:
    """After an UNAVAILABLE: whether it was the connection (now down), not the node's answer."""
    return bool(node.channel.get_state() != grpc.ChannelConnectivity.READY)


class Forwarder:
    """A generic handler (grpc asks its ``service`` for the handler of each call)."""

    def __init__(self, upstreams: Upstreams) -> None:
        self.upstreams = upstreams
        self._kinds = method_kinds()
        self.calls = 0
        self.failovers = 0

    def service(self, handler_call_details: grpc.HandlerCallDetails
                ) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        client_streams, server_streams = self._kinds.get(method, (True, True))
        if not client_streams and not server_streams:
            async def unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
                return await self._unary(method, request, context)

            return grpc.unary_unary_rpc_method_handler(unary)
        if not client_streams:
            async def one(request: bytes, context: grpc.aio.ServicerContext
                          ) -> AsyncIterator[bytes]:
                async for answer in self._stream(method, _once(request), context):
                    yield answer

            return grpc.unary_stream_rpc_method_handler(one)

        async def many(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
                       ) -> AsyncIterator[bytes]:
            async for answer in self._stream(method, requests, context):
                yield answer

        return grpc.stream_stream_rpc_method_handler(many)

    async def _nodes(self) -> AsyncIterator[Upstream]:
        """The nodes to try in turn, each one reached (its connection up)."""
        for node in self.upstreams.candidates():
            if await reachable(node):
                yield node
            else:
                self.upstreams.failed(node)

    async def _unary(self, method: str, request: bytes,
                     context: grpc.aio.ServicerContext) -> bytes:
        self.calls += 1
        metadata = passed_on(context.invocation_metadata())
        last: grpc.aio.AioRpcError | None = None
        async for node in self._nodes():
            if last is not None:
                self.failovers += 1
            call = node.channel.unary_unary(method)(request, metadata=metadata,
                                                    timeout=context.time_remaining())
            try:
                answer: bytes = await call
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    await _abort(context, exc)
                if _broke(node):
                    self.upstreams.failed(node)
                if NEVER_SENT in (exc.details() or "") or method in IMMUTABLE:
                    last = exc
                    continue
                await _abort(context, exc)
                raise  # abort raises; for the type checker
            self.upstreams.reached(node)
            await _relay_initial(context, await call.initial_metadata())
            context.set_trailing_metadata(passed_on(await call.trailing_metadata()))
            return answer
        await _unavailable(context, last, self.upstreams)
        raise AssertionError("unreachable")  # abort raises

    async def _stream(self, method: str, requests: AsyncIterator[bytes],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        self.calls += 1
        relay = _StreamRelay(method, requests, passed_on(context.invocation_metadata()),
                             context.time_remaining())
        last: grpc.aio.AioRpcError | None = None
        try:
            async for node in self._nodes():
                if last is not None:
                    self.failovers += 1
                await relay.open(node.channel)
                try:
                    async for answer in relay.answers(context):
                        yield answer
                except grpc.aio.AioRpcError as exc:
                    if (exc.code() == grpc.StatusCode.UNAVAILABLE and not relay.relayed):
                        if _broke(node):
                            self.upstreams.failed(node)
                        last = exc
                        continue
                    await _abort(context, exc)
                self.upstreams.reached(node)
                return
            await _unavailable(context, last, self.upstreams)
        finally:
            await relay.close()


async def _once(request: bytes) -> AsyncIterator[bytes]:
    yield request


class _StreamRelay:
    """One caller's stream: its messages pumped to the node's call of the moment, kept until
    the first answer is relayed (a failover gives them to the next node's call)."""

    def __init__(self, method: str, requests: AsyncIterator[bytes],
                 metadata: tuple[tuple[str, Any], ...], timeout: float | None) -> None:
        self._method = method
        self._requests = requests
        self._metadata = metadata
        self._timeout = timeout
        self._sent: list[bytes] = []
        self._caller_done = False
        self._call: grpc.aio.StreamStreamCall | None = None
        self._lock = asyncio.Lock()
        self._pump: asyncio.Task[None] | None = None
        self.relayed = False

    async def open(self, channel: grpc.aio.Channel) -> None:
        async with self._lock:
            if self._call is not None:
                self._call.cancel()
            call = channel.stream_stream(self._method)(metadata=self._metadata,
                                                       timeout=self._timeout)
            self._call = call
            with contextlib.suppress(*_ENDED):  # the call ended: answers() reads its status
                for message in self._sent:
                    await call.write(message)
                if self._caller_done:
                    await call.done_writing()
        if self._pump is None:
            self._pump = asyncio.ensure_future(self._forward_requests())

    async def _forward_requests(self) -> None:
        try:
            async for message in self._requests:
                async with self._lock:
                    if not self.relayed:
                        self._sent.append(message)
                    await self._write(message)
        except (grpc.aio.AioRpcError, grpc.RpcError, asyncio.InvalidStateError):
            return  # the caller went away: its call is cancelled, and ours with it
        async with self._lock:
            self._caller_done = True
            call = self._call
            if call is not None:
                with contextlib.suppress(*_ENDED):
                    await call.done_writing()

    async def _write(self, message: bytes) -> None:
        call = self._call
        if call is None:
            return
        # The call may have ended: answers() reads its status (and fails over, if it may).
        with contextlib.suppress(*_ENDED):
            await call.write(message)

    async def answers(self, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """The node's answers; raises AioRpcError on its error status, sets its trailing
        metadata on the caller's call when it ends well."""
        call = self._call
        assert call is not None
        while True:
            answer = await call.read()
            if answer is grpc.aio.EOF:
                break
            if not self.relayed:
                self.relayed = True
                self._sent.clear()
                await _relay_initial(context, await call.initial_metadata())
            yield answer
        code = await call.code()
        if code != grpc.StatusCode.OK:
            raise grpc.aio.AioRpcError(code, await call.initial_metadata(),
                                       await call.trailing_metadata(), await call.details())
        context.set_trailing_metadata(passed_on(await call.trailing_metadata()))

    async def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
        if self._call is not None:
            self._call.cancel()


async def _relay_initial(context: grpc.aio.ServicerContext, metadata: Any) -> None:
    own = passed_on(metadata)
    if own:
        await context.send_initial_metadata(own)


async def _abort(context: grpc.aio.ServicerContext, exc: grpc.aio.AioRpcError) -> None:
    await context.abort(exc.code(), exc.details() or "",
                        passed_on(exc.trailing_metadata()))


async def _unavailable(context: grpc.aio.ServicerContext, last: grpc.aio.AioRpcError | None,
                       upstreams: Upstreams) -> None:
    if last is not None:
        await _abort(context, last)
    await context.abort(grpc.StatusCode.UNAVAILABLE,
                        "no node's etcd API could be reached (tried "
                        f"{', '.join(upstreams.addresses) or 'none: no node known yet'})")
