"""The etcd front's failover rules (``kraft_spark/etcd_front/forward.py``) against two real
gRPC servers standing in for nodes, over real sockets: one that answers every call
UNAVAILABLE (a node that cannot serve), one that answers with its name, the caller's message
and the caller's ``token`` metadata. Messages are bytes: the front decodes nothing, so the
stand-ins need not speak etcd. etcdctl through the front against real nodes, and its failover
when a node is killed: ``tests/etcd/test_etcdctl.py``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from kraft_spark.etcd_front.forward import Forwarder
from kraft_spark.etcd_front.process import apply_command, parse_nodes
from kraft_spark.etcd_front.upstreams import Upstreams
from tests.net.helpers import free_ports

PUT, RANGE, WATCH = "/etcdserverpb.KV/Put", "/etcdserverpb.KV/Range", "/etcdserverpb.Watch/Watch"


def _token(context: grpc.aio.ServicerContext) -> bytes:
    return dict(context.invocation_metadata() or ()).get("token", "").encode()


class Node:
    """A stand-in node: ``up`` answers ``<name>:<message>:<token>``, else UNAVAILABLE."""

    def __init__(self, name: str, up: bool) -> None:
        self.name, self.up = name, up
        self.calls: list[str] = []

    async def _unary(self, method: str, request: bytes,
                     context: grpc.aio.ServicerContext) -> bytes:
        self.calls.append(method)
        if not self.up:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{self.name} cannot serve")
        return f"{self.name}:".encode() + request + b":" + _token(context)

    async def _watch(self, requests: AsyncIterator[bytes],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        self.calls.append(WATCH)
        async for request in requests:
            if not self.up:  # the create reached it, nothing came back
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"{self.name} cannot serve")
            yield f"{self.name}:".encode() + request + b":" + _token(context)

    def service(self, details: Any) -> grpc.RpcMethodHandler | None:
        method = details.method
        if method == WATCH:
            return grpc.stream_stream_rpc_method_handler(self._watch)

        async def unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return await self._unary(method, request, context)

        return grpc.unary_unary_rpc_method_handler(unary)

    async def start(self) -> str:
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((self,))
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return f"127.0.0.1:{port}"


async def _front(nodes: list[str]) -> tuple[grpc.aio.Server, Forwarder, grpc.aio.Channel]:
    forwarder = Forwarder(Upstreams(nodes))
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((forwarder,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, forwarder, grpc.aio.insecure_channel(f"127.0.0.1:{port}")


TOKEN = (("token", "secret"),)


def test_writes_reads_and_streams_fail_over_by_etcds_rules() -> None:
    async def body() -> None:
        down, up = Node("a", up=False), Node("b", up=True)
        front, forwarder, channel = await _front([await down.start(), await up.start()])
        try:
            # A write that reached a node is not sent again: its UNAVAILABLE is the caller's.
            try:
                await channel.unary_unary(PUT)(b"k=v", metadata=TOKEN, timeout=10)
                raise AssertionError("a write that may have been made was sent again")
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE
                assert exc.details() == "a cannot serve"
            assert up.calls == []
            # A read changes nothing: the next node answers it, with the caller's token.
            assert await channel.unary_unary(RANGE)(b"k", metadata=TOKEN,
                                                    timeout=10) == b"b:k:secret"
            # A stream nothing of which came back: opened on the next node with what the
            # caller sent so far, then carried on there.
            call = channel.stream_stream(WATCH)(metadata=TOKEN)
            await call.write(b"create")
            assert await call.read() == b"b:create:secret"
            await call.write(b"progress")
            assert await call.read() == b"b:progress:secret"
            await call.done_writing()
            assert await call.read() is grpc.aio.EOF
            assert await call.code() == grpc.StatusCode.OK
            assert down.calls == [PUT, RANGE, WATCH] and up.calls == [RANGE, WATCH]
            assert forwarder.failovers == 2
        finally:
            await channel.close()
            await front.stop(None)
            await down.server.stop(None)
            await up.server.stop(None)

    asyncio.run(body())


def test_a_node_that_cannot_be_reached_is_skipped_even_for_a_write() -> None:
    async def body() -> None:
        up = Node("b", up=True)
        nobody = f"127.0.0.1:{free_ports(1)[0]}"  # refused: nothing is sent there
        front, forwarder, channel = await _front([nobody, await up.start()])
        try:
            assert await channel.unary_unary(PUT)(b"k=v", metadata=TOKEN,
                                                  timeout=10) == b"b:k=v:secret"
            # It rests: the next call goes to the reachable node first.
            assert forwarder.upstreams.candidates()[0].address != nobody
            assert apply_command(forwarder, f"nodes {nobody}") is None
            try:
                await channel.unary_unary(PUT)(b"k=v", metadata=TOKEN, timeout=10)
                raise AssertionError("answered with no node reachable")
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE
        finally:
            await channel.close()
            await front.stop(None)
            await up.server.stop(None)

    asyncio.run(body())


def test_the_control_lines() -> None:
    assert parse_nodes("127.0.0.1:1,[::1]:2") == ["127.0.0.1:1", "[::1]:2"]
    assert parse_nodes("-") == []
    forwarder = Forwarder(Upstreams())
    assert "unknown command" in (apply_command(forwarder, "leader x:1") or "")
    assert "port must be a number" in (apply_command(forwarder, "nodes x:y") or "")
