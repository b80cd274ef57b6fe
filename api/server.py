"""Serving the HTTP API with uvicorn: every listener's server (``make_server``), and the
sidecar in a background thread of this process (``serve_in_thread``).

uvicorn runs the app's lifespan on its own event loop, so a backend made by
``create_app(backend_factory=...)`` is built and closed on the loop that serves its requests.

    handle = serve_in_thread(app, "127.0.0.1", 0)   # 0: any free port
    ...  # http://127.0.0.1:{handle.port}/
    handle.stop()

``serve_in_thread`` leaves the process's logging configuration alone (uvicorn's loggers propagate
to the root logger).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Final

import uvicorn

from api.limits import ASGIApp, HttpLimits, ListenerLimits
from kraft_spark.addresses import http_url
from kraft_spark.net.acceptor import EagerAcceptor

__all__ = [
    "EagerAcceptServer", "OwnSignalsServer", "ServerHandle", "make_server", "serve_in_thread",
]

GRACEFUL_SHUTDOWN_S: Final = 10


class EagerAcceptServer(uvicorn.Server):
    """uvicorn's server, its listening sockets served by ``EagerAcceptor`` instead of the
    loop's ``create_server``, each connection under the listener's ``ListenerLimits``.

    Why its own accept: uvloop accepts one connection per loop iteration, so 256 clients
    connecting at once to a busy node waited up to ~1 s for their first request to be read
    (``kraft_spark.net.acceptor``). Everything else (lifespan, connection tracking, graceful
    shutdown) is uvicorn's: its protocols register themselves in its server state.

    Build it with :func:`make_server`. Serving sockets it did not accept (the acceptor's
    ``adopt``) needs uvicorn's protocol factory, which uvicorn does not publish: ``startup``
    builds it as uvicorn's own ``startup`` does, from the protocol class uvicorn loaded for the
    documented ``http="httptools"`` and the keyword arguments uvicorn passes it. That is this
    project's one use of uvicorn beyond its documented API, in this method alone; the tests that
    serve a request through ``make_server`` fail at once if a uvicorn release changes it.
    """

    def __init__(self, config: uvicorn.Config, limits: ListenerLimits) -> None:
        super().__init__(config)
        self.limits = limits
        self._acceptors: list[EagerAcceptor] = []

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if not sockets:
            raise ValueError("EagerAcceptServer serves the listening sockets it is given")
        await super().startup(sockets=[])  # lifespan and state, no listener of its own
        if self.should_exit or not self.started:
            return
        config, loop = self.config, asyncio.get_running_loop()

        def uvicorn_protocol() -> asyncio.Protocol:
            protocol: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state,
                app_state=self.lifespan.state, _loop=loop,
            )
            return protocol

        create_protocol = self.limits.protocol_factory(uvicorn_protocol)
        for sock in sockets:
            acceptor = EagerAcceptor(loop, sock, create_protocol)
            acceptor.start()
            self._acceptors.append(acceptor)

    @property
    def acceptors(self) -> list[EagerAcceptor]:
        """One per listening socket given to ``startup`` (after it); ``adopt`` serves a
        connection accepted elsewhere."""
        return list(self._acceptors)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for acceptor in self._acceptors:
            acceptor.close()  # before uvicorn closes the sockets under the readers
        await super().shutdown(sockets=sockets)


class OwnSignalsServer(EagerAcceptServer):
    """For a server inside a process that handles SIGINT/SIGTERM itself (a node): ``serve()``
    leaves the process's signal handlers alone; the process stops the server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def make_server(
    app: ASGIApp, host: str, port: int, *, limits: HttpLimits | None = None,
    own_signals: bool = False, **options: Any,
) -> EagerAcceptServer:
    """A server for ``app`` on the listening socket bound to ``host:port`` (pass it to
    ``serve``/``run``), with the limits every kraft-spark listener takes (``api.limits``;
    defaults if None) and no proxy-headers layer (nothing reads the client's address).
    ``options``: more ``uvicorn.Config`` settings. ``own_signals``: see ``OwnSignalsServer``."""
    listener = ListenerLimits(limits)
    config = uvicorn.Config(listener.asgi(app), host=host, port=port, http="httptools",
                            proxy_headers=False, **options)
    return (OwnSignalsServer if own_signals else EagerAcceptServer)(config, listener)


class ServerHandle:
    """A uvicorn server running in a background thread."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, host: str, port: int):
        self._server = server
        self._thread = thread
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return http_url(self.host, self.port)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float = GRACEFUL_SHUTDOWN_S + 5.0) -> None:
        """Stop accepting, let requests in flight finish (up to the graceful timeout), run the
        app's shutdown, and join the thread. Idempotent."""
        self._server.should_exit = True
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(5.0)
        if self._thread.is_alive():
            raise RuntimeError(f"the HTTP server on {self.url} did not stop within {timeout_s} s")

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def bind_tcp(host: str, port: int) -> socket.socket:
    """A listening socket for uvicorn; ``OSError`` when it cannot listen (nothing left open).

    proto must be IPPROTO_TCP (not 0, as socket.create_server leaves it): asyncio sets
    TCP_NODELAY on accepted connections only then; without it Nagle's algorithm and delayed
    ACKs add ~40 ms to every response."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _bind(host: str, port: int) -> socket.socket:
    try:
        return bind_tcp(host, port)
    except OSError as exc:
        raise RuntimeError(f"cannot listen on {host}:{port} ({exc}): choose another port") from exc


def serve_in_thread(
    app: ASGIApp,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    log_level: str = "warning",
    graceful_shutdown_s: int = GRACEFUL_SHUTDOWN_S,
    startup_timeout_s: float = 30.0,
    limits: HttpLimits | None = None,
) -> ServerHandle:
    """Start uvicorn on ``host:port`` (0: a free port, see ``handle.port``) in a daemon thread
    with its own event loop; returns once it accepts connections (after the app's startup).
    ``limits``: connection cap and header timeout (``api.limits``; defaults if None)."""
    sock = _bind(host, port)
    bound_port = int(sock.getsockname()[1])
    server = make_server(
        app, host, bound_port, limits=limits, lifespan="on", log_config=None,
        log_level=log_level, access_log=False, timeout_graceful_shutdown=graceful_shutdown_s,
    )

    def run() -> None:
        # uvicorn raises SystemExit when the app's startup fails; the thread just ends then.
        with contextlib.suppress(SystemExit):
            server.run(sockets=[sock])

    thread = threading.Thread(target=run, name=f"http-sidecar-{bound_port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive():
            sock.close()
            raise RuntimeError(
                f"the HTTP server on {host}:{bound_port} failed to start (the app's startup "
                "raised?): see the log"
            )
        if time.monotonic() > deadline:
            server.should_exit = True
            thread.join(5.0)
            sock.close()
            raise RuntimeError(
                f"the HTTP server on {host}:{bound_port} did not start within {startup_timeout_s} s"
            )
        time.sleep(0.005)
    return ServerHandle(server, thread, host, bound_port)
