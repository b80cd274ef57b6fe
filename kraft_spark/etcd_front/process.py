"""The etcd front as a process of its own (``python -m kraft_spark.etcd_front``), outside its
parent's interpreter lock, as the HTTP router is (``kraft_spark.proxy.process``).

    python -m kraft_spark.etcd_front --listen 127.0.0.1:2379 --nodes 127.0.0.1:23790,...

It prints one JSON line once it listens (``{"listening": "127.0.0.1:2379"}``), then reads
commands on its standard input, one per line:

* ``nodes HOST:PORT,HOST:PORT,...``: the nodes' etcd addresses, in order of preference, from
  now on (calls in flight finish where they are);
* ``nodes -``: none known (calls answer UNAVAILABLE).

It exits 0 when its standard input ends (its parent stopped or died) or on SIGTERM/SIGINT,
letting calls in flight finish for ``STOP_GRACE_S``; 2 when it cannot listen (the reason on
stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Final

import grpc

from kraft_spark import aio
from kraft_spark.etcd_front.forward import Forwarder
from kraft_spark.etcd_front.upstreams import CHANNEL_OPTIONS, Upstreams
from kraft_spark.properties import parse_endpoint
from kraft_spark.raft.config import ConfigError

STOP_GRACE_S: Final = 1.0


def parse_nodes(text: str) -> list[str]:
    """``HOST:PORT,...`` (or ``-``: none), each checked as the properties files check one."""
    text = text.strip()
    if text in ("", "-"):
        return []
    nodes = []
    for item in text.split(","):
        try:
            host, port = parse_endpoint(item.strip(), "node")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        nodes.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return nodes


def apply_command(forwarder: Forwarder, line: str) -> str | None:
    """Carry out one control line; the error to report, if it is not one."""
    verb, _, arg = line.strip().partition(" ")
    if verb != "nodes":
        return f"unknown command {line.strip()!r} (expected 'nodes HOST:PORT,...' or 'nodes -')"
    try:
        forwarder.upstreams.set(parse_nodes(arg))
    except ValueError as exc:
        return str(exc)
    return None


async def _run(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    forwarder = Forwarder(Upstreams(args.nodes))
    server = grpc.aio.server(options=[*CHANNEL_OPTIONS[:2], ("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((forwarder,))
    host, port = args.listen
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(target)
    except RuntimeError as exc:
        print(f"cannot listen on {target}: {exc}", file=sys.stderr, flush=True)
        return 2
    await server.start()
    print(json.dumps({"listening": f"{target.rpartition(':')[0]}:{bound}"}), flush=True)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def commands() -> None:
        while line := await reader.readline():
            if (error := apply_command(forwarder, line.decode(errors="replace"))) is not None:
                print(error, file=sys.stderr, flush=True)
            await forwarder.upstreams.close_dropped()
        stop.set()  # the parent is gone

    task = loop.create_task(commands())
    await stop.wait()
    task.cancel()
    await server.stop(STOP_GRACE_S)
    await forwarder.upstreams.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kraft_spark.etcd_front",
                                     description="The application's etcd address: forwards "
                                     "every call of etcd's v3 API to a node.")
    parser.add_argument("--listen", type=_listen, required=True, metavar="HOST:PORT")
    parser.add_argument("--nodes", type=_nodes, default=[], metavar="HOST:PORT,...")
    return aio.run(_run(parser.parse_args(argv)))


def _listen(text: str) -> tuple[str, int]:
    try:
        return parse_endpoint(text, "--listen")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _nodes(text: str) -> list[str]:
    try:
        return parse_nodes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
