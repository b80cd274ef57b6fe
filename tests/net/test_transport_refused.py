"""The transport tells a refused connection (nothing listens: the peer process is gone) from
every other failure, which the shell reports to the core as ``on_request_failed(refused=...)``."""

from __future__ import annotations

import asyncio
import errno
import time

import pytest

from kraft_spark.protocol import ApiKey
from kraft_spark.transport import Connection, TransportError, is_connection_refused

from .helpers import free_ports

pytestmark = pytest.mark.timeout(60)


def test_only_econnrefused_is_a_refusal() -> None:
    assert is_connection_refused(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    assert is_connection_refused(OSError(errno.ECONNREFUSED, "Connection refused"))
    assert not is_connection_refused(TimeoutError())
    assert not is_connection_refused(ConnectionResetError(errno.ECONNRESET, "reset"))
    assert not is_connection_refused(OSError(errno.EHOSTUNREACH, "No route to host"))
    assert not is_connection_refused(ValueError("not an OSError"))
    # One host name, several addresses (Python 3.11's open_connection): all must refuse.
    both = OSError(
        "Multiple exceptions: [Errno 111] Connect call failed ('::1', 9, 0, 0), "
        "[Errno 111] Connect call failed ('127.0.0.1', 9)"
    )
    assert is_connection_refused(both)
    mixed = OSError(
        "Multiple exceptions: [Errno 99] Cannot assign requested address, "
        "[Errno 111] Connect call failed ('127.0.0.1', 9)"
    )
    assert not is_connection_refused(mixed)
    assert not is_connection_refused(OSError("Multiple exceptions: something else"))


def test_a_closed_port_is_refused_and_fails_fast_during_the_backoff() -> None:
    port = free_ports(1)[0]  # nothing listens there

    async def main() -> None:
        conn = Connection("127.0.0.1", port, reconnect_backoff_s=0.5,
                          fail_fast_when_refused=True)
        try:
            with pytest.raises(TransportError) as first:
                await conn.request(ApiKey.API_VERSIONS, 0, {}, 1.0)
            assert first.value.refused and not first.value.sent
            started = time.monotonic()
            with pytest.raises(TransportError) as second:
                await conn.request(ApiKey.API_VERSIONS, 0, {}, 1.0)
            assert second.value.refused and not second.value.sent
            assert time.monotonic() - started < 0.4  # did not wait out the 0.5 s backoff
        finally:
            await conn.close()

    asyncio.run(main())


def test_without_fail_fast_requests_wait_for_the_next_attempt() -> None:
    port = free_ports(1)[0]

    async def main() -> None:
        conn = Connection("127.0.0.1", port, reconnect_backoff_s=0.2)
        try:
            with pytest.raises(TransportError) as first:
                await conn.request(ApiKey.API_VERSIONS, 0, {}, 1.0)
            assert first.value.refused
            started = time.monotonic()
            with pytest.raises(TransportError) as second:
                await conn.request(ApiKey.API_VERSIONS, 0, {}, 1.0)
            assert second.value.refused
            assert time.monotonic() - started >= 0.15  # paced by the reconnect backoff
        finally:
            await conn.close()

    asyncio.run(main())


def test_a_connection_closed_by_the_peer_is_not_a_refusal() -> None:
    async def main() -> None:
        async def slam(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()  # accepts, then hangs up: a live process, not a refusal

        server = await asyncio.start_server(slam, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = Connection("127.0.0.1", port, fail_fast_when_refused=True)
        try:
            with pytest.raises(TransportError) as failure:
                await conn.request(ApiKey.API_VERSIONS, 0, {}, 2.0)
            assert not failure.value.refused
        finally:
            await conn.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_a_connect_timeout_is_not_a_refusal() -> None:
    # A non-routable address: the attempt times out (or fails as unreachable without a route),
    # never refused.
    async def main() -> None:
        conn = Connection("10.255.255.1", 9, connect_timeout_s=0.05,
                          fail_fast_when_refused=True)
        try:
            with pytest.raises(TransportError) as failure:
                await conn.request(ApiKey.API_VERSIONS, 0, {}, 1.0)
            assert not failure.value.refused
        finally:
            await conn.close()

    asyncio.run(main())


def test_refused_implies_not_sent() -> None:
    assert TransportError("x", refused=True).sent is False
    assert TransportError("x").sent is True and TransportError("x").refused is False
