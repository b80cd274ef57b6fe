"""``kraft-spark local``'s etcd addresses: node i serves etcd's v3 API (``kraft.etcd.listener``,
``api.etcd``) whenever the nodes serve the HTTP API themselves (``--node-http-base-port``: the
etcd API shares that API's store and credentials), on ``--etcd-base-port B`` + i, or, by
default, on a free port picked here; ``--no-etcd`` turns it off. Each node's JSON line gains
``"etcd": "host:port"`` (an etcdctl ``--endpoints`` value)."""

from __future__ import annotations

import argparse
import contextlib
import socket
from typing import Any

from kraft_spark.errors import CommandError


def register_options(parser: Any) -> None:
    parser.add_argument("--etcd-base-port", type=int, default=None, metavar="B",
                        help="with --node-http-base-port: node i serves etcd's v3 gRPC API on "
                        "port B + i (default: a free port each; see docs/etcd-api.md)")
    parser.add_argument("--no-etcd", action="store_true",
                        help="do not serve etcd's v3 gRPC API")


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with contextlib.closing(socket.socket(family, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def etcd_ports(args: argparse.Namespace, http_ports: list[int | None]) -> list[int | None]:
    """Each node's etcd port (None: no etcd API)."""
    serves_http = any(p is not None for p in http_ports)
    if args.no_etcd or (args.etcd_base_port is None and not serves_http):
        return [None] * len(http_ports)
    if not serves_http:
        raise CommandError("--etcd-base-port needs --node-http-base-port (etcd's API shares "
                           "the nodes' HTTP API's store and credentials)")
    if args.etcd_base_port is not None:
        base = args.etcd_base_port
        if not 1 <= base <= 65536 - len(http_ports):
            raise CommandError(f"--etcd-base-port {base} leaves no room for "
                               f"{len(http_ports)} ports")
        return [base + i for i in range(len(http_ports))]
    return [_free_port(args.host) for _ in http_ports]


def etcd_properties(host: str, ports: list[int | None], node_id: int) -> list[str]:
    """The node's ``kraft.etcd.*`` properties (``host`` in Kafka's host:port form)."""
    port = ports[node_id]
    if port is None:
        return []
    urls = ",".join(f"{i}@{host}:{p}" for i, p in enumerate(ports) if p is not None)
    return [f"kraft.etcd.listener={host}:{port}", f"kraft.etcd.urls={urls}"]
