"""The HTTP sidecar in front of a quorum: FastAPI app + uvicorn in a thread of this process.

Used by ``kraft-spark local --http-port`` and by the Spark driver. The sidecar's
``AsyncQuorumClient`` is created and closed on uvicorn's own event loop (``backend_factory``).
A thread is enough where the host process's main thread mostly waits (``local`` waits on its
children; the driver waits on the JVM); see the README for the measurement behind the choice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from api.app import create_app
from api.limits import HttpLimits
from api.server import ServerHandle, serve_in_thread
from kraft_spark.client import AsyncQuorumClient
from kraft_spark.client.security import ClientSecurity
from kraft_spark.client.timeouts import ClientTimeouts
from kraft_spark.gc_tuning import tune_for_serving
from kraft_spark.http_auth import Credentials
from kraft_spark.metrics import Registry
from kraft_spark.raft.config import QuorumConfig
from kraft_spark.store.service import KvStore


def start_sidecar(
    bootstrap: Sequence[str],
    host: str,
    port: int,
    *,
    cluster_id: str | None = None,
    credentials: Credentials | None = None,
    registry: Registry | None = None,
    limits: HttpLimits | None = None,
    quorum: QuorumConfig | None = None,
    routers: Sequence[Any] = (),
    http_urls: Callable[[], dict[int, str]] | None = None,
    store: KvStore | None = None,
    security: ClientSecurity | None = None,
) -> ServerHandle:
    """Serve the HTTP API on ``host:port`` (0: any free port) until ``handle.stop()``. The
    client's timeouts follow ``quorum``'s settings (Kafka's defaults when not given).
    ``routers``: more FastAPI routers (the Spark application's ``/v1/app``), behind the same
    credentials. ``http_urls``: the HTTP API each node serves itself, for ``/v1/quorum``. ``store``:
    a copy of the store's state in this process (the Spark driver's observer), for reads by
    key, conditional writes and watches; without one those answer 503 naming where to go.
    ``security``: how the sidecar authenticates to the quorum's listeners (the administrator's
    SASL identity, as it also carries voter changes)."""
    tune_for_serving()
    endpoints = list(bootstrap)
    timeouts = ClientTimeouts.for_quorum(quorum or QuorumConfig())

    def backend() -> AsyncQuorumClient:
        return AsyncQuorumClient(endpoints, cluster_id=cluster_id, coalesce=True,
                                 **timeouts.client_kwargs(),
                                 **(security or ClientSecurity()).client_kwargs())

    app = create_app(backend_factory=backend, credentials=credentials, metrics=registry,
                     http_urls=http_urls, store=lambda: store)
    for router in routers:
        app.include_router(router)
    return serve_in_thread(app, host, port, limits=limits)
