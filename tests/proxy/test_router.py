"""The append router on real loopback sockets, in front of two small upstream servers that
name themselves in their answers (what is tested is the router: routing, framing, reuse,
and what a client is told when an upstream fails)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable

from kraft_spark import aio
from kraft_spark.net.handoff import HandoffReceiver, handoff_name
from kraft_spark.proxy.messages import RequestReader, ResponseWatcher
from kraft_spark.proxy.router import AppendRouter, RouterLimits, serve

APPEND = (b"POST /v1/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: 11\r\n\r\n{\"key\":\"k\"}")
QUORUM = b"GET /v1/quorum HTTP/1.1\r\nHost: x\r\n\r\n"


class Upstream:
    """Answers every request with ``{"by": name, "path": ..., "port": ...}`` (``port``: the
    one the connection was accepted on; a HEAD with its head only); ``mute``: reads a request
    and closes the connection without answering (a leader killed mid-request); ``hang``: reads
    it and never answers (a frozen leader); ``handoff``: takes connections handed over on
    its address's channel, as a node's HTTP API does."""

    def __init__(self, name: str, *, mute: bool = False, hang: bool = False,
                 handoff: bool = False) -> None:
        self.name, self.mute, self.hang = name, mute, hang
        self.requests: list[tuple[str, bytes]] = []
        self.connections = 0
        self.server: asyncio.AbstractServer | None = None
        self.handoff = handoff
        self.receiver: HandoffReceiver | None = None
        self._adopted: set[asyncio.Task[None]] = set()

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = self.server.sockets[0].getsockname()[:2]
        if self.handoff:
            self.receiver = HandoffReceiver(asyncio.get_running_loop(),
                                            handoff_name(host, port), self._adopt)
            assert self.receiver.start()
        return host, port

    def _adopt(self, conn: socket.socket) -> None:
        async def serve() -> None:
            await self._serve(*await asyncio.open_connection(sock=conn))

        task = asyncio.get_running_loop().create_task(serve())
        self._adopted.add(task)
        task.add_done_callback(self._adopted.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        port = writer.get_extra_info("sockname")[1]
        parser = RequestReader()
        while data := await reader.read(65536):
            for request in parser.feed(data):
                self.requests.append((request.path, request.body))
                if self.mute:
                    writer.close()
                    return
                if self.hang:
                    continue
                body = json.dumps({"by": self.name, "path": request.path,
                                   "port": port}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(body), b"" if request.method == "HEAD" else body))
        writer.close()

    def close(self) -> None:
        if self.receiver is not None:
            self.receiver.close()
        if self.server is not None:
            self.server.close()


async def exchange(port: int, *requests: bytes) -> list[tuple[int, bytes]]:
    """Send ``requests`` on one connection (pipelined) and read one answer per request."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(requests))
    answers: list[tuple[int, bytes]] = []
    for _ in requests:
        watcher, raw = ResponseWatcher(), b""
        while True:
            data = await asyncio.wait_for(reader.read(65536), 5)
            if not data:
                writer.close()
                return answers
            raw += data
            if watcher.feed(data):
                break
        answers.append((watcher.status, raw.partition(b"\r\n\r\n")[2]))
    writer.close()
    return answers


def run_with(test: Callable[[AppendRouter, int, Upstream, Upstream], Awaitable[None]],
             *, leader_mute: bool = False, leader_hangs: bool = False,
             limits: RouterLimits | None = None, handoff: bool = False) -> None:
    """``handoff``: the leader takes connections handed over, and the router hands them."""
    async def main() -> None:
        leader = Upstream("leader", mute=leader_mute, hang=leader_hangs, handoff=handoff)
        sidecar = Upstream("sidecar")
        router = AppendRouter(await sidecar.start(), limits, handoff=handoff)
        router.set_leader(await leader.start())
        sock = socket.create_server(("127.0.0.1", 0))
        acceptor = serve(router, sock)
        try:
            await test(router, sock.getsockname()[1], leader, sidecar)
        finally:
            acceptor.close()
            sock.close()
            router.close()
            leader.close()
            sidecar.close()
            await asyncio.sleep(0.05)

    aio.run(main())


def by(answer: tuple[int, bytes]) -> str:
    return str(json.loads(answer[1])["by"])


def test_appends_go_to_the_leader_and_the_rest_to_the_sidecar_in_order() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        answers = await exchange(port, APPEND, QUORUM, APPEND, b"GET /v1/kv/a HTTP/1.1\r\n\r\n")
        assert [(status, by((status, body))) for status, body in answers] == [
            (200, "leader"), (200, "sidecar"), (200, "leader"), (200, "leader")]
        assert leader.requests[0] == ("/v1/records", b'{"key":"k"}')
        # One kept-alive connection to each upstream served the client's four requests.
        assert (leader.connections, sidecar.connections) == (1, 1)
        router.set_leader(None)  # no leader known: appends wait at the sidecar
        assert by((await exchange(port, APPEND))[0]) == "sidecar"

    run_with(test)


def test_a_client_that_expects_100_continue_is_invited_to_send_its_body() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head, _, body = APPEND.partition(b"\r\n\r\n")
        writer.write(head + b"\r\nExpect: 100-continue\r\n\r\n")  # as curl does over 1 KiB
        invited = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert invited == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(body)
        answer = await asyncio.wait_for(reader.read(65536), 5)
        assert answer.startswith(b"HTTP/1.1 200 ") and b'"by": "leader"' in answer
        writer.close()

    run_with(test)


def test_an_unreachable_leader_sends_the_append_to_the_sidecar() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        with socket.socket() as closed:  # a port nothing listens on
            closed.bind(("127.0.0.1", 0))
            router.set_leader(closed.getsockname())
        assert [by(a) for a in await exchange(port, APPEND)] == ["sidecar"]
        resting = router.leader
        assert resting is not None and resting.resting()  # not asked for half a second
        assert [by(a) for a in await exchange(port, APPEND)] == ["sidecar"]
        assert resting.connects == 1  # no second connect was tried
        await asyncio.sleep(0.6)
        assert not resting.resting()  # then tried again: the host names no other leader

    run_with(test)


def test_a_leader_lost_mid_append_is_a_502_unless_the_append_has_a_key() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        ((status, body),) = await exchange(port, APPEND)
        assert status == 502
        assert b"may or may not have been carried out" in body
        assert b"Idempotency-Key" in body
        keyed = APPEND.replace(b"Host: x\r\n", b"Host: x\r\nIdempotency-Key: K1\r\n")
        assert [by(a) for a in await exchange(port, keyed)] == ["sidecar"]
        assert router.stats.resent == 1
        assert sidecar.requests == [("/v1/records", b'{"key":"k"}')]

    run_with(test, leader_mute=True)


def test_a_request_at_a_frozen_leader_is_given_up_once_another_leads() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        keyed = APPEND.replace(b"Host: x\r\n", b"Host: x\r\nIdempotency-Key: K1\r\n")
        pending = asyncio.ensure_future(exchange(port, keyed))
        unkeyed = asyncio.ensure_future(exchange(port, APPEND))
        await asyncio.sleep(0.2)
        assert len(leader.requests) == 2 and not pending.done()
        successor = Upstream("next")
        try:
            router.set_leader(await successor.start())  # the observer saw an election
            # After the grace the keyed append is sent again (through the sidecar, which finds
            # the next leader itself); the other is told it may or may not have been made.
            assert [by(a) for a in await asyncio.wait_for(pending, 5)] == ["sidecar"]
            ((status, body),) = await asyncio.wait_for(unkeyed, 5)
            assert status == 502 and b"did not answer within 1 s" in body, body
        finally:
            successor.close()  # an open server would hold the loop's close

    run_with(test, leader_hangs=True)


def test_a_head_request_ends_with_its_head() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"HEAD /v1/quorum HTTP/1.1\r\nHost: x\r\n\r\n" + QUORUM)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 ") and b"content-length: " in head
        # The next request on the same connection is answered whole.
        rest = await asyncio.wait_for(reader.readuntil(b"}"), 5)
        assert rest.startswith(b"HTTP/1.1 200 ") and b'"by": "sidecar"' in rest
        writer.close()

    run_with(test)


def test_bad_input_gets_a_clear_error_and_the_router_goes_on() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        ((status, body),) = await exchange(port, b"NOT HTTP AT ALL\r\n\r\n")
        assert status == 400 and b"malformed HTTP request" in body
        ((status, body),) = await exchange(port, b"POST /v1/records HTTP/1.1\r\n"
                                                 b"Content-Length: 99999999\r\n\r\n")
        assert status == 413
        assert [by(a) for a in await exchange(port, APPEND)] == ["leader"]
        assert not sidecar.requests and len(leader.requests) == 1

    run_with(test)


def test_connections_over_the_limit_are_refused_with_503() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        held = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.05)
        ((status, body),) = await exchange(port, APPEND)
        assert status == 503 and b"too many connections" in body
        held[1].close()
        await asyncio.sleep(0.05)
        assert [by(a) for a in await exchange(port, APPEND)] == ["leader"]

    run_with(test, limits=RouterLimits(max_connections=1))


def test_an_incomplete_request_times_out_with_408() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(APPEND[:20])
        answer = await asyncio.wait_for(reader.read(65536), 5)
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert await reader.read(10) == b""  # and closed
        writer.close()

    run_with(test, limits=RouterLimits(header_timeout_s=0.2))


def test_the_router_process_listens_follows_its_commands_and_exits_with_its_input() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kraft_spark.proxy", "--listen", "127.0.0.1:0",
         "--sidecar", "127.0.0.1:9"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        listening = json.loads(proc.stdout.readline())["listening"]
        port = int(listening.rpartition(":")[2])
        proc.stdin.write("leader 127.0.0.1:9\nfollow me\n")
        proc.stdin.flush()
        # Nothing listens on port 9: the append falls back to the sidecar, unreachable too.
        ((status, body),) = aio.run(exchange(port, APPEND))
        assert status == 503 and b"cannot be reached" in body
        proc.stdin.close()
        assert proc.wait(10) == 0
        assert "unknown command 'follow me'" in (proc.stderr.read() if proc.stderr else "")
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            taken = subprocess.run(
                [sys.executable, "-m", "kraft_spark.proxy", "--listen",
                 f"127.0.0.1:{busy.getsockname()[1]}", "--sidecar", "127.0.0.1:9"],
                check=False, capture_output=True, text=True, timeout=30,
                stdin=subprocess.DEVNULL)
        assert taken.returncode == 2 and "cannot listen on" in taken.stderr
    finally:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
