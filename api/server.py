"""Serving the sidecar with uvicorn: in a background thread of this process, or blocking.

Either way uvicorn runs the app's lifespan on its own event loop, so a backend made by
``create_app(backend_factory=...)`` is built and closed on the loop that serves its requests.

    handle = serve_in_thread(app, "127.0.0.1", 0)   # 0: any free port
    ...  # http://127.0.0.1:{handle.port}/
    handle.stop()

``serve_in_thread`` leaves the process's logging configuration alone (uvicorn's loggers propagate
to the root logger); ``run_server`` installs uvicorn's default logging, as the ``uvicorn`` command
does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from types import TracebackType
from typing import Final

import uvicorn
from fastapi import FastAPI

from api.limits import HttpLimits, uvicorn_options
from kraft_spark.net.acceptor import EagerAcceptor

__all__ = ["EagerAcceptServer", "ServerHandle", "run_server", "serve_in_thread"]

GRACEFUL_SHUTDOWN_S: Final = 10


class EagerAcceptServer(uvicorn.Server):
    """uvicorn's server, its listening sockets served by ``EagerAcceptor`` instead of the
    loop's ``create_server``: uvloop accepts one connection per loop iteration, so 256 clients
    connecting at once to a busy node waited up to ~1 s for their first request to be read
    (``kraft_spark.net.acceptor``). Everything else (lifespan, connection tracking, graceful
    shutdown) is uvicorn's: the protocols register themselves in ``server_state``."""

    _acceptors: list[EagerAcceptor]

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._acceptors = []
        if sockets is None:  # uvicorn binds host:port itself: keep its own path
            await super().startup(sockets=None)
            return
        await super().startup(sockets=[])  # lifespan and state, no listener of its own
        if self.should_exit or not self.started:
            return
        config, loop = self.config, asyncio.get_running_loop()

        def create_protocol() -> asyncio.Protocol:
            protocol: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state,
                app_state=self.lifespan.state, _loop=loop,
            )
            return protocol

        for sock in sockets:
            acceptor = EagerAcceptor(loop, sock, create_protocol)
            acceptor.start()
            self._acceptors.append(acceptor)

    @property
    def acceptors(self) -> list[EagerAcceptor]:
        """One per listening socket given to ``startup`` (after it); ``adopt`` serves a
        connection accepted elsewhere."""
        return list(getattr(self, "_acceptors", []))

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for acceptor in getattr(self, "_acceptors", []):
            acceptor.close()  # before uvicorn closes the sockets under the readers
        await super().shutdown(sockets=sockets)


class ServerHandle:
    """A uvicorn server running in a background thread."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, host: str, port: int):
        self._server = server
        self._thread = thread
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

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
    app: FastAPI,
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
    config = uvicorn.Config(
        app,
        host=host,
        port=bound_port,
        **uvicorn_options(limits),
        lifespan="on",
        log_config=None,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=graceful_shutdown_s,
    )
    server = EagerAcceptServer(config)

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


def run_server(
    app: FastAPI,
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    log_level: str = "info",
    graceful_shutdown_s: int = GRACEFUL_SHUTDOWN_S,
    limits: HttpLimits | None = None,
) -> None:
    """Serve in this thread until SIGINT/SIGTERM (when called from the main thread)."""
    sock = _bind(host, port)
    config = uvicorn.Config(
        app,
        host=host,
        port=int(sock.getsockname()[1]),
        **uvicorn_options(limits),
        lifespan="on",
        log_level=log_level,
        timeout_graceful_shutdown=graceful_shutdown_s,
    )
    server = EagerAcceptServer(config)
    logging.getLogger("uvicorn.error").info("serving on http://%s:%d", host, config.port)
    try:
        server.run(sockets=[sock])
    except SystemExit as exc:  # uvicorn exits on a startup failure
        raise RuntimeError(
            f"the HTTP server on {host}:{port} failed to start (the app's startup raised): see "
            "the log"
        ) from exc
    finally:
        sock.close()
