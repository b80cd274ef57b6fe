"""The HTTP API embedded in a node (``kraft.http.listener``): ``api.app`` served by uvicorn on
the node's own event loop, like etcd where every member serves clients. The node does not
import this module: ``kraft-spark node`` gives it ``serve_node_http`` (an
``EmbeddedHttpFactory``), so the library stays free of the web layer.

Same process, same loop: a request to the leader reaches its ``RaftCore`` through
``RaftNode.submit_local`` with no process hop (``api.node_backend``). The server runs as
uvicorn's ``Server.serve()`` in a task, leaving the node's SIGINT/SIGTERM handlers alone
(``api.server.OwnSignalsServer``: ``kraft-spark node`` stops gracefully on those); the node
stops the server before anything else in ``RaftNode.stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Final, cast

from fastapi import FastAPI

from api.app import create_app
from api.etcd.context import EtcdNode
from api.etcd.server import EtcdServer, start_etcd
from api.handoff_close import CloseHandedOverWhenDeposed
from api.limits import HttpLimits
from api.node_backend import NodeBackend
from api.server import EagerAcceptServer, make_server
from api.server import bind_tcp as bind_listener
from kraft_spark.addresses import http_url
from kraft_spark.http_auth import Credentials
from kraft_spark.metrics import Registry
from kraft_spark.net.config import NodeConfig
from kraft_spark.net.handoff import HandoffReceiver, handoff_name
from kraft_spark.net.local_requests import LocalNode
from kraft_spark.store.history import DEFAULT_RETENTION
from kraft_spark.store.service import NodeStore, StoreNode

log = logging.getLogger(__name__)

# How long requests in flight may take to finish when the node stops (then they are cancelled).
GRACEFUL_SHUTDOWN_S: Final = 2
# Beyond that: connections closed, the app's shutdown run; this bounds the whole stop.
SHUTDOWN_MARGIN_S: Final = 3.0


def bind_tcp(host: str, port: int) -> socket.socket:
    """The sidecar's listener (``api.server.bind_tcp``), its error naming the node's setting."""
    try:
        return bind_listener(host, port)
    except OSError as exc:
        raise OSError(
            exc.errno, f"kraft.http.listener: cannot listen on {host}:{port} ({exc.strerror}): "
            "choose another port"
        ) from exc


class NodeHttpServer:
    """A uvicorn server on the running loop; ``await stop()`` once."""

    def __init__(self, server: EagerAcceptServer, app: FastAPI, sock: socket.socket, *,
                 backend: NodeBackend, host: str, port: int, metrics: Registry) -> None:
        self._server = server
        self.app = app
        self.handed_over = metrics.counter(
            "kraft_spark_http_handed_over_connections_total",
            "Connections the append router on this host handed to this API (their first "
            "request an append or a read by key) instead of proxying their requests")
        self._sock = sock
        self.backend = backend
        self.host = host
        self.port = port
        self._serving: asyncio.Task[None] | None = None
        self.store: NodeStore | None = None
        # Connections the append router hands over (kraft_spark.net.handoff).
        self.handoff: HandoffReceiver | None = None
        self.etcd: EtcdServer | None = None  # etcd's API (kraft.etcd.listener), stopped first

    @property
    def url(self) -> str:
        return http_url(self.host, self.port)

    async def _start(self) -> None:
        server = self._server
        loop = asyncio.get_running_loop()

        async def serve() -> None:
            # SystemExit: uvicorn's way of saying the app's startup failed.
            with contextlib.suppress(SystemExit):
                await server.serve(sockets=[self._sock])

        self._serving = loop.create_task(serve(), name=f"http-serve-{self.port}")
        while not server.started and not self._serving.done():
            await asyncio.sleep(0.005)
        if not server.started:
            self._sock.close()
            raise RuntimeError(
                f"the HTTP API on {self.url} failed to start (the app's startup raised): see "
                "the log"
            )
        acceptors = server.acceptors
        if acceptors:
            adopt, handed = acceptors[0].adopt, self.handed_over

            def take(conn: socket.socket) -> None:
                handed.inc()
                adopt(conn)

            self.handoff = HandoffReceiver(loop, handoff_name(self.host, self.port), take)
            self.handoff.start()

    async def stop(self) -> None:
        """Stop accepting, let requests in flight finish (up to ``GRACEFUL_SHUTDOWN_S``), run
        the app's shutdown, close the backend. Bounded in time; never raises."""
        server = self._server
        server.should_exit = True
        if self.etcd is not None:
            await self.etcd.stop()
        if self.handoff is not None:
            self.handoff.close()
        if self.store is not None:
            self.store.close()  # ends the watch streams, so the shutdown need not wait on them
        serving = self._serving
        if serving is not None:
            # uvicorn's shutdown: stop accepting, let requests in flight finish (up to
            # GRACEFUL_SHUTDOWN_S), run the app's shutdown.
            done, _ = await asyncio.wait({serving}, timeout=GRACEFUL_SHUTDOWN_S + SHUTDOWN_MARGIN_S)
            if not done:
                log.warning("the HTTP API on %s did not shut down in time; closing it", self.url)
                server.force_exit = True
                serving.cancel()
                await asyncio.wait({serving}, timeout=SHUTDOWN_MARGIN_S)
            elif serving.exception() is not None:
                log.error("the HTTP API on %s failed to shut down cleanly", self.url,
                          exc_info=serving.exception())
        server.limits.close_all()  # what the graceful shutdown left open (a stuck stream)
        self._sock.close()
        try:
            await asyncio.wait_for(self.backend.close(), SHUTDOWN_MARGIN_S)
        except Exception:
            log.exception("closing the HTTP API's backend failed")


async def start_node_http(
    node: LocalNode, host: str, port: int, *, credentials: Credentials | None = None,
    limits: HttpLimits | None = None, http_urls: dict[int, str] | None = None,
    etcd: tuple[str, int] | None = None, etcd_urls: dict[int, str] | None = None,
    history_revisions: int = DEFAULT_RETENTION,
) -> NodeHttpServer:
    """Serve ``api.app`` for ``node`` on ``host:port`` (0: any free port) on the running loop;
    returns once it accepts connections. ``limits``: ``api.limits`` (defaults if None);
    ``http_urls``: every node's HTTP API, advertised by ``/v1/quorum``."""
    sock = bind_tcp(host, port)
    bound_port = int(sock.getsockname()[1])
    backend = NodeBackend(node)
    urls = dict(http_urls or {})
    # The node is a RaftNode (its HTTP factory is called once its state is loaded).
    store = NodeStore(cast(StoreNode, node), backend.forwarder,
                      history_revisions=history_revisions)
    registry = Registry()
    app = create_app(backend, credentials=credentials, http_urls=lambda: urls, store=lambda: store,
                     metrics=registry)
    server = make_server(
        CloseHandedOverWhenDeposed(app, bound_port, lambda: node.is_leader), host, bound_port,
        limits=limits, own_signals=True, ws="none", lifespan="on",
        log_config=None,  # the node's logging configuration stays as it is
        log_level="warning", access_log=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    handle = NodeHttpServer(server, app, sock, backend=backend, host=host, port=bound_port,
                            metrics=registry)
    handle.store = store
    try:
        await handle._start()
    except BaseException:
        sock.close()
        store.close()
        await backend.close()
        raise
    if etcd is not None:  # etcd's API over the same store and credentials (api.etcd)
        try:
            handle.etcd = await start_etcd(cast(EtcdNode, node), store, backend, *etcd,
                                           credentials=credentials, urls=etcd_urls or {})
        except BaseException:
            await handle.stop()
            raise
    return handle


async def serve_node_http(node: LocalNode, config: NodeConfig) -> NodeHttpServer:
    """The node's ``EmbeddedHttpFactory``: ``kraft.http.*`` of ``config`` (the listener must be
    set). ``kraft-spark node`` hands it to ``RaftNode``, which calls it at start."""
    assert config.http_listener is not None
    host, port = config.http_listener
    limits = HttpLimits(config.http_max_connections, config.http_header_timeout_ms / 1000)
    return await start_node_http(node, host, port, credentials=config.http_credentials,
                                 limits=limits, http_urls=config.http_urls,
                                 etcd=config.etcd_listener, etcd_urls=config.etcd_urls,
                                 history_revisions=config.etcd_history_revisions)


__all__ = [
    "GRACEFUL_SHUTDOWN_S", "NodeHttpServer", "bind_tcp", "serve_node_http", "start_node_http",
]
