"""The append router as a process of its own (``python -m kraft_spark.proxy``).

Its own process, so the user's address is served outside the host's interpreter lock: the
Spark driver's Python process also runs the materializer, the observer and py4j, and an
append forwarded there waited behind them (issue 39's measurement: the driver's endpoint at
0.61x the leader's own API).

    python -m kraft_spark.proxy --listen 127.0.0.1:8080 --sidecar 127.0.0.1:40123

It prints one JSON line once it listens (``{"listening": "127.0.0.1:8080"}``), then reads
commands on its standard input, one per line:

* ``leader HOST:PORT``: appends go to that HTTP API from now on;
* ``leader -``: no leader known; appends go to the sidecar.

When the leader's API runs on this host, connections whose first request is an append are
handed to its process (``proxy/triage.py``); ``--no-handoff`` proxies every request.

It exits 0 when its standard input ends (its parent stopped or died) or on SIGTERM/SIGINT,
after closing its connections; 2 when it cannot listen (the reason on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import sys

from kraft_spark import aio
from kraft_spark.properties import parse_endpoint
from kraft_spark.proxy.router import AppendRouter, RouterLimits, serve
from kraft_spark.raft.config import ConfigError


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` as the properties files take it (``kraft_spark.properties``)."""
    try:
        return parse_endpoint(text, "address")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def apply_command(router: AppendRouter, line: str) -> str | None:
    """Carry out one control line; the error to report, if it is not one."""
    verb, _, arg = line.strip().partition(" ")
    if verb != "leader":
        return f"unknown command {line.strip()!r} (expected 'leader HOST:PORT' or 'leader -')"
    if arg.strip() == "-":
        router.set_leader(None)
        return None
    try:
        router.set_leader(parse_address(arg.strip()))
    except argparse.ArgumentTypeError as exc:
        return str(exc)
    return None


async def _run(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    host, port = args.listen
    try:
        sock = socket.create_server((host, port), backlog=1024)
    except OSError as exc:
        print(f"cannot listen on {host}:{port}: {exc}", file=sys.stderr, flush=True)
        return 2
    router = AppendRouter(args.sidecar, RouterLimits(args.max_connections,
                                                     args.header_timeout),
                          handoff=not args.no_handoff)
    acceptor = serve(router, sock)
    bound = sock.getsockname()
    print(json.dumps({"listening": f"{bound[0]}:{bound[1]}"}), flush=True)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def commands() -> None:
        while line := await reader.readline():
            if (error := apply_command(router, line.decode(errors="replace"))) is not None:
                print(error, file=sys.stderr, flush=True)
        stop.set()  # the parent is gone

    task = loop.create_task(commands())
    await stop.wait()
    task.cancel()
    acceptor.close()
    sock.close()
    router.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kraft_spark.proxy",
                                     description="The append router on the user's address.")
    parser.add_argument("--listen", type=parse_address, required=True, metavar="HOST:PORT")
    parser.add_argument("--sidecar", type=parse_address, required=True, metavar="HOST:PORT")
    parser.add_argument("--max-connections", type=int, default=2048)
    parser.add_argument("--header-timeout", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument("--no-handoff", action="store_true",
                        help="proxy every request, even when the leader runs on this host")
    return aio.run(_run(parser.parse_args(argv)))
