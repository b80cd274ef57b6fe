"""etcd's listener as several ``grpc.aio`` servers on one port (``api.etcd.acceptors``): they
share the port with nobody else, calls over many connections all reach the same handlers, and
stopping releases the port."""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

import grpc
import pytest

from api.etcd.acceptors import bind
from kraft_spark.etcd.pb import rpc_pb2

RANGE = "/etcdserverpb.KV/Range"


def _listening_sockets(port: int) -> int:
    """Sockets listening on ``port`` (any address; gRPC may bind IPv4 as IPv6), from /proc."""
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as fh:
            rows += [line.split() for line in fh.readlines()[1:]]
    return sum(1 for row in rows if int(row[1].rsplit(":", 1)[1], 16) == port and row[3] == "0A")


def test_a_port_something_listens_on_is_refused() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError) as refused:
            bind((), "127.0.0.1", taken.getsockname()[1], None)
    assert refused.value.errno == errno.EADDRINUSE


def test_a_port_another_nodes_acceptors_share_is_refused() -> None:
    """Another node's acceptors set SO_REUSEPORT too: without the probe, a second node
    configured onto the same port would silently take half of its connections."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        with pytest.raises(OSError) as refused:
            bind((), "127.0.0.1", other.getsockname()[1], None)
    assert refused.value.errno == errno.EADDRINUSE


def test_calls_over_many_connections_reach_the_handlers_of_every_server() -> None:
    served: list[bytes] = []

    async def answer(request: rpc_pb2.RangeRequest, _context: Any) -> rpc_pb2.RangeResponse:
        served.append(request.key)
        return rpc_pb2.RangeResponse(count=1)

    handler = grpc.method_handlers_generic_handler("etcdserverpb.KV", {
        "Range": grpc.unary_unary_rpc_method_handler(
            answer, request_deserializer=rpc_pb2.RangeRequest.FromString,
            response_serializer=rpc_pb2.RangeResponse.SerializeToString)})

    async def main() -> tuple[int, int, list[int]]:
        servers = bind((handler,), "127.0.0.1", 0, None, count=4)
        await servers.start()
        listening = _listening_sockets(servers.port)
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{servers.port}",
                                              options=[("grpc.use_local_subchannel_pool", 1)])
                    for _ in range(12)]
        try:
            calls = [channel.unary_unary(
                RANGE, request_serializer=rpc_pb2.RangeRequest.SerializeToString,
                response_deserializer=rpc_pb2.RangeResponse.FromString)(
                    rpc_pb2.RangeRequest(key=b"k%d" % i), timeout=10)
                for i, channel in enumerate(channels)]
            answers = await asyncio.gather(*calls)
        finally:
            for channel in channels:
                await channel.close()
            await servers.stop(1.0)
        return servers.port, listening, [a.count for a in answers]

    port, listening, counts = asyncio.run(main())
    assert listening == 4  # four servers, one port
    assert counts == [1] * 12 and sorted(served) == sorted(b"k%d" % i for i in range(12))
    assert _listening_sockets(port) == 0  # stopped: the port is free again
