"""``kraft-spark node --config FILE``: run one voter or observer until SIGINT/SIGTERM.

On a signal the embedded HTTP API (``kraft.http.listener``, if set) stops first, letting its
requests in flight finish briefly; then a leader resigns (EndQuorumEpoch to the others), the log
is flushed and the directory lock released, and the process exits 0. The HTTP server runs on
this process's event loop without signal handlers of its own: SIGINT/SIGTERM are the node's.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any

from kraft_spark import aio
from kraft_spark.errors import CommandError
from kraft_spark.net.storage_failure import (
    STORAGE_FAILURE_EXIT,
    StorageFailure,
    is_disk_failure,
    storage_failure_text,
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "node",
        help="run one quorum node (voter or observer) from a properties file",
        description="Run one node. The log directory (log.dirs) must be formatted first "
        "with `kraft-spark format`.",
    )
    parser.add_argument("--config", required=True, help="properties file (Kafka's names)")
    parser.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="override one property (repeatable)",
    )
    parser.add_argument(
        "--lock-timeout", type=float, default=30.0,
        help="seconds to wait for another process to release the log directory (default 30)",
    )
    parser.set_defaults(func=_run_node)


def configure_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _run_node(args: argparse.Namespace) -> int:
    from kraft_spark.gc_tuning import tune_for_serving
    from kraft_spark.log.errors import LogError
    from kraft_spark.net.config import NodeConfig
    from kraft_spark.properties import load_properties
    from kraft_spark.raft.config import ConfigError

    try:
        props = load_properties(args.config)
        for item in args.override:
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"--override expects KEY=VALUE, got {item!r}")
            props[key.strip()] = value.strip()
        config = NodeConfig.from_properties(props)
    except (ConfigError, ValueError) as exc:
        raise CommandError(f"{args.config}: {exc}") from exc
    configure_logging()
    from kraft_spark.proc_tree import stop_with_parent

    stop_with_parent()  # a node of `kraft-spark local` stops when local dies, even by SIGKILL
    try:
        tune_for_serving()
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    try:
        aio.run(_serve(config, args.lock_timeout))
    except StorageFailure as exc:  # after start-up: the supervisor restarts the node
        raise CommandError(f"log directory failure: {exc}",
                           exit_code=STORAGE_FAILURE_EXIT) from exc
    except (LogError, OSError) as exc:  # at start-up: a refusal that names the fix
        if is_disk_failure(exc):  # ... unless the disk itself failed: restart me later
            raise CommandError(f"log directory failure at start-up: {storage_failure_text(exc)}",
                               exit_code=STORAGE_FAILURE_EXIT) from exc
        raise CommandError(str(exc), exit_code=1) from exc
    except ConfigError as exc:  # controller.quorum.bootstrap.servers found no quorum
        raise CommandError(f"{args.config}: {exc}") from exc
    return 0


async def _serve(config: Any, lock_timeout_s: float) -> None:
    from kraft_spark.log.errors import LogError
    from kraft_spark.net.metrics_server import start_metrics_server
    from kraft_spark.net.node import RaftNode
    from kraft_spark.store.lease_expiry import LeaseExpirer

    if config.bootstrap_servers and not config.voters:  # KIP-853: find the quorum first
        from kraft_spark.commands.bootstrap_servers import discover_voters

        config = await discover_voters(config)
    http: Callable[..., Any] | None = None
    if config.http_listener is not None:
        # The HTTP layer (FastAPI, pydantic, uvicorn: ~0.4 s of imports) only for a node
        # that serves it.
        from api.node_http import serve_node_http as http
    node = RaftNode(config, lock_timeout_s=lock_timeout_s, http=http)
    await node.start()
    expirer = LeaseExpirer(node).start()  # acts only while this node leads
    metrics = None
    if config.metrics_port is not None:
        metrics = await start_metrics_server(node, config.host, config.metrics_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    waiter = asyncio.ensure_future(node.wait_closed())
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    expirer.stop()
    if metrics is not None:
        metrics.close()
    if waiter.done():
        try:
            waiter.result()  # re-raise a fatal storage error
        except (LogError, OSError) as exc:
            raise StorageFailure(storage_failure_text(exc)) from exc
        return
    await node.stop(graceful=True)
    waiter.cancel()
