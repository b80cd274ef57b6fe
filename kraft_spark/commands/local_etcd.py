"""``kraft-spark local``'s node ports beyond the quorum's: node i serves the HTTP API itself
(``kraft.http.listener``) on ``--node-http-base-port B`` + i or, by default, on a free port
picked here (``--no-node-http``: not at all), and etcd's v3 API (``kraft.etcd.listener``,
``api.etcd``: it shares that HTTP API's store and credentials) on ``--etcd-base-port B`` + i or
a free port (``--no-etcd``: not at all). Each node's JSON line gains ``"http"`` and ``"etcd":
"host:port"`` (an etcdctl ``--endpoints`` value). With ``--http-port`` the front's line gains
the etcd front's address (``kraft_spark.etcd_front``, ``--etcd-port``) beside its HTTP one."""

from __future__ import annotations

import argparse
import contextlib
import socket
from collections.abc import Callable, Sequence
from typing import Any

from kraft_spark.errors import CommandError


def register_options(parser: Any) -> None:
    parser.add_argument("--node-http-base-port", type=int, default=None, metavar="B",
                        help="node i serves the HTTP API itself on port B + i (default: a "
                        "free port each)")
    parser.add_argument("--no-node-http", action="store_true",
                        help="the nodes serve no HTTP API themselves (nor etcd's, which "
                        "shares their store)")
    parser.add_argument("--etcd-base-port", type=int, default=None, metavar="B",
                        help="node i serves etcd's v3 gRPC API on port B + i (default: a free "
                        "port each; see docs/etcd-api.md)")
    parser.add_argument("--etcd-port", type=int, default=None, metavar="PORT",
                        help="with --http-port: serve etcd's API beside it on this port, "
                        "forwarded to the nodes (default: a free port)")
    parser.add_argument("--no-etcd", action="store_true",
                        help="do not serve etcd's v3 gRPC API")


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with contextlib.closing(socket.socket(family, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _free_ports(host: str, count: int, taken: set[int]) -> list[int]:
    """``count`` free ports, none in ``taken`` (the OS may hand a closed port out again)."""
    ports: list[int] = []
    while len(ports) < count:
        port = _free_port(host)
        if port not in taken:
            taken.add(port)
            ports.append(port)
    return ports


def _based(flag: str, base: int, count: int) -> list[int]:
    if not 1 <= base <= 65536 - count:
        raise CommandError(f"{flag} {base} leaves no room for {count} ports")
    return [base + i for i in range(count)]


def node_http_ports(args: argparse.Namespace, quorum_ports: Sequence[int]) -> list[int | None]:
    """Each node's HTTP port (None: no HTTP API on the node)."""
    count = len(quorum_ports)
    if args.no_node_http:
        if args.node_http_base_port is not None:
            raise CommandError("--no-node-http and --node-http-base-port: choose one")
        return [None] * count
    if args.node_http_base_port is None:
        return list(_free_ports(args.host, count, set(quorum_ports)))
    ports = _based("--node-http-base-port", args.node_http_base_port, count)
    if set(ports) & set(quorum_ports):
        raise CommandError(
            f"--node-http-base-port {ports[0]}: ports {ports[0]}-{ports[-1]} overlap the "
            f"quorum's {quorum_ports[0]}-{quorum_ports[-1]} (--base-port): choose another"
        )
    return list(ports)


def etcd_ports(args: argparse.Namespace, http_ports: list[int | None],
               taken: Sequence[int] = ()) -> list[int | None]:
    """Each node's etcd port (None: no etcd API)."""
    if args.etcd_port is not None:
        if args.http_port is None:
            raise CommandError("--etcd-port serves etcd's API beside --http-port's address: "
                               "add --http-port (each node's own etcd address is printed "
                               "without it)")
        if not 0 <= args.etcd_port <= 65535:
            raise CommandError(f"--etcd-port must be from 0 (any free port) to 65535, got "
                               f"{args.etcd_port}")
    serves_http = any(p is not None for p in http_ports)
    if args.no_etcd:
        return [None] * len(http_ports)
    if not serves_http:
        if args.etcd_base_port is not None:
            raise CommandError("--etcd-base-port needs the nodes' HTTP API (etcd's API shares "
                               "its store and credentials): drop --no-node-http")
        return [None] * len(http_ports)
    if args.etcd_base_port is not None:
        return list(_based("--etcd-base-port", args.etcd_base_port, len(http_ports)))
    used = {p for p in [*http_ports, *taken] if p is not None}
    return list(_free_ports(args.host, len(http_ports), used))


def etcd_properties(host: str, ports: list[int | None], node_id: int) -> list[str]:
    """The node's ``kraft.etcd.*`` properties (``host`` in Kafka's host:port form)."""
    port = ports[node_id]
    if port is None:
        return []
    urls = ",".join(f"{i}@{host}:{p}" for i, p in enumerate(ports) if p is not None)
    return [f"kraft.etcd.listener={host}:{port}", f"kraft.etcd.urls={urls}"]


def start_etcd_front(args: argparse.Namespace, quorum_host: str, ports: list[int | None], *,
                     tls: bool, say: Callable[[str], None]) -> Any:
    """With ``--http-port`` and the nodes' etcd APIs: the etcd front beside the HTTP address,
    forwarding to the nodes in order (``kraft_spark.etcd_front``), its process started (not
    yet listening: ``etcd_front_address``); None without them, and with ``tls`` (the nodes'
    etcd listeners then take TLS with client certificates, which the front, plaintext, would
    have to end and stand in for)."""
    nodes = [f"{quorum_host}:{p}" for p in ports if p is not None]
    if nodes and tls:
        if args.etcd_port is not None:
            raise CommandError("--etcd-port: the nodes serve etcd's API over TLS (ssl.*), and "
                               "the etcd front does not: use the nodes' etcd addresses")
        say("the nodes serve etcd's API over TLS (ssl.*): no etcd address beside --http-port's; "
            "etcd's clients take the nodes' own")
        return None
    if not nodes:
        if args.etcd_port is not None:
            raise CommandError("--etcd-port needs the nodes' etcd API (drop --no-etcd and "
                               "--no-node-http)")
        return None
    from kraft_spark.etcd_front.front import EtcdFront

    return EtcdFront(args.host, args.etcd_port or 0, lambda: nodes, interval_s=None)


def etcd_front_address(front: Any, quorum_host: str) -> dict[str, str]:
    """The etcd front's entry of the address line (none without a front); waits until it
    listens."""
    if front is None:
        return {}
    from kraft_spark.etcd_front.front import EtcdFrontError

    try:
        return {"etcd": f"{quorum_host}:{front.port}"}
    except EtcdFrontError as exc:
        raise CommandError(str(exc), exit_code=1) from exc
