"""``kraft-spark local``: a whole quorum on this machine, one child process per node.

First start: creates the cluster id (kept in ``DATA_DIR/cluster.id``) and formats
``DATA_DIR/node-<id>``. Every start: writes ``DATA_DIR/node-<id>.properties``, starts each node
with ``kraft-spark node`` (its log in ``DATA_DIR/logs/node-<id>.log``), waits until it listens,
and prints one JSON line per node. It restarts nothing by itself; on SIGINT/SIGTERM it stops
the nodes gracefully (the leader resigns with EndQuorumEpoch) and exits 0.

The listeners take SASL/PLAIN (``kraft_spark.quorum_auth``): ``DATA_DIR/quorum-users`` is made
on a first start, and ``DATA_DIR/admin.properties`` holds the administrator's client settings for
``--command-config`` (``--quorum-insecure``: no authentication, said loudly).

Every node serves the HTTP API itself (``kraft.http.listener``: an append to the leader goes
straight into its core, other nodes forward to the leader) and etcd's v3 gRPC API, on free ports
or from ``--node-http-base-port``/``--etcd-base-port`` (``commands.local_etcd``; ``--no-etcd``,
``--no-node-http``), and each node's JSON line gains ``"http"`` and ``"etcd"``. ``--http-port``
adds one address in front of them all: the append router with the sidecar behind it (the
sidecar alone with ``--no-node-http``), and beside it the etcd front (``kraft_spark.etcd_front``),
both printed on one more JSON line.

The nodes are started together and their lines printed in order as each listens: a node's
start-up is mostly imports, which overlap on a machine of more than one core.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from kraft_spark.addresses import http_url, url_host
from kraft_spark.client.security import ClientSecurity
from kraft_spark.commands.local_etcd import (
    etcd_front_address,
    etcd_ports,
    etcd_properties,
    node_http_ports,
    register_options,
    start_etcd_front,
)
from kraft_spark.commands.node_supervisor import NodeSupervisor
from kraft_spark.errors import CommandError
from kraft_spark.http_auth import CREDENTIALS_FILE, Credentials, server_credentials
from kraft_spark.net.cluster_acl import PLAINTEXT_ALLOWED_KEY, check_listener
from kraft_spark.net.cpu_placement import AFFINITY_CHOICES, AFFINITY_ROLE
from kraft_spark.net.storage_failure import is_disk_failure
from kraft_spark.proc_tree import PARENT_ENV
from kraft_spark.quorum_auth import QuorumAuth, ensure_quorum_auth
from kraft_spark.raft.config import ConfigError, QuorumConfig
from kraft_spark.secret_files import private_dir
from kraft_spark.stop_signals import StopSignals

DEFAULT_BASE_PORT = 9093
START_TIMEOUT_S = 30.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "local",
        help="run a local quorum (one child process per voter)",
        description="Format (first time) and start a local quorum on 127.0.0.1.",
    )
    parser.add_argument("--voters", type=int, default=3, help="number of voters (default 3)")
    parser.add_argument("--data-dir", required=True, help="where node logs and state live")
    parser.add_argument(
        "--base-port", type=int, default=DEFAULT_BASE_PORT,
        help=f"node i listens on base-port + i (default {DEFAULT_BASE_PORT})",
    )
    parser.add_argument("--http-port", type=int, default=None,
                        help="also serve the HTTP API on this port (0: any free port), in "
                        "front of all the nodes, and etcd's API beside it (--etcd-port)")
    parser.add_argument("--http-credentials", default=None, metavar="FILE",
                        help="the HTTP API's scoped tokens (lines '<scope> <token> [<name>]', "
                        "mode 0600; default <data-dir>/http-credentials, created with an admin, "
                        "a write and a read token on a first start)")
    parser.add_argument("--http-insecure", action="store_true",
                        help="serve the HTTP API without authentication (anyone who reaches "
                        "it can append and change the voters)")
    parser.add_argument("--quorum-insecure", action="store_true",
                        help="run the Kafka-protocol listeners without authentication (anyone "
                        "who reaches them can read the log and change the voters); by default "
                        "they take SASL/PLAIN with <data-dir>/quorum-users, and clients use "
                        "--command-config <data-dir>/admin.properties")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    parser.add_argument(
        "--cpu-affinity", choices=AFFINITY_CHOICES, default=AFFINITY_ROLE,
        help="role (default): the leader on the lower half of this machine's CPUs, the other "
        "voters on the upper half, following leadership (kraft.cpu.affinity); none: leave "
        "placement to the scheduler",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="extra node property, e.g. controller.quorum.fetch.timeout.ms=1000 (repeatable)",
    )
    register_options(parser)
    parser.set_defaults(func=_run_local)


def read_cluster_id(data_dir: str) -> str | None:
    """The cluster id kept in ``data_dir``; None before the first start."""
    path = os.path.join(data_dir, "cluster.id")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return fh.read().strip()


def _quorum_of(settings: list[str]) -> QuorumConfig:
    """The quorum settings the nodes run with (the ``--set`` ones over Kafka's defaults), for
    the sidecar's timeouts; the nodes have already refused invalid ones at start-up."""
    try:  # it reads its own keys and ignores the others
        return QuorumConfig.from_properties(dict(item.split("=", 1) for item in settings))
    except ConfigError:
        return QuorumConfig()


def cluster_id_for(data_dir: str) -> str:
    """The cluster id kept in ``data_dir`` (created on first use)."""
    existing = read_cluster_id(data_dir)
    if existing is not None:
        return existing
    cluster_id = uuid.uuid4().hex[:22]
    write_cluster_id(data_dir, cluster_id)
    return cluster_id


def write_cluster_id(data_dir: str, cluster_id: str) -> None:
    """Keep ``cluster_id`` in ``data_dir`` (atomically, durably)."""
    from kraft_spark.log.checkpoints import atomic_write
    from kraft_spark.log.fs import RealFileSystem

    private_dir(data_dir)
    atomic_write(RealFileSystem(), os.path.join(data_dir, "cluster.id"),
                 f"{cluster_id}\n".encode())


def _wait_listening(host: str, port: int, proc: subprocess.Popen[bytes], log_path: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CommandError(
                f"node on port {port} exited with code {proc.returncode} at start-up; see "
                f"{log_path}", exit_code=1,
            )
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise CommandError(f"node on port {port} did not listen within {START_TIMEOUT_S:.0f} s; "
                       f"see {log_path}", exit_code=1)


def _check_port_free(host: str, port: int, flag: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As the nodes bind: a connection of an earlier run in TIME_WAIT does not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CommandError(
                f"{flag}: cannot listen on {host}:{port} ({exc.strerror}): another process "
                f"uses it; choose another {flag}"
            ) from exc


def _run_local(args: argparse.Namespace) -> int:
    from kraft_spark.log.errors import LogError
    from kraft_spark.log.meta import format_log_dir, validate_cluster_id

    if not 1 <= args.voters <= 9:
        raise CommandError(f"--voters must be between 1 and 9, got {args.voters}")
    if not 1 <= args.base_port <= 65535 - args.voters:
        raise CommandError(f"--base-port {args.base_port} leaves no room for {args.voters} ports")
    if args.http_port is not None and not 0 <= args.http_port <= 65535:
        raise CommandError(f"--http-port must be from 0 (any free port) to 65535, got "
                           f"{args.http_port}")
    ports = [args.base_port + i for i in range(args.voters)]
    http_ports = node_http_ports(args, ports)
    # host:port everywhere below (listeners, voters, bootstrap) is Kafka's form: an IPv6
    # address in brackets.
    quorum_host = url_host(args.host)
    voters = ",".join(f"{i}@{quorum_host}:{p}" for i, p in enumerate(ports))
    extra = []
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"--set expects KEY=VALUE, got {item!r}")
        extra.append(f"{key.strip()}={value.strip()}")
    # Before anything is written or started: a plaintext listener beyond loopback stops every
    # node (kraft-spark node refuses it), so say it once, here, with the fix.
    settings = dict(item.split("=", 1) for item in extra)
    tls = bool(settings.get("ssl.certificate.location"))
    try:
        check_listener(args.host, tls=tls,
                       plaintext_allowed=settings.get(PLAINTEXT_ALLOWED_KEY, "").lower()
                       == "true")
    except ConfigError as exc:
        raise CommandError(f"--host {args.host}: {exc}") from None
    # A port another process listens on would pass
    # _wait_listening (it only connects) while our node failed to bind it.
    etcd = etcd_ports(args, http_ports, ports)
    for flag, flag_ports in (("--base-port", ports), ("--node-http-base-port", http_ports),
                             ("--http-port", [args.http_port]), ("--etcd-base-port", etcd),
                             ("--etcd-port", [args.etcd_port])):
        for port in flag_ports:
            if port:
                _check_port_free(args.host, port, flag)
    data_dir = os.path.abspath(args.data_dir)
    try:
        private_dir(data_dir)
        private_dir(os.path.join(data_dir, "logs"))
        cluster_id = cluster_id_for(data_dir)
    except (OSError, UnicodeError) as exc:
        raise CommandError(f"--data-dir {data_dir}: {exc}: use a writable directory") from exc
    try:
        validate_cluster_id(cluster_id)
    except ValueError as exc:
        raise CommandError(f"{os.path.join(data_dir, 'cluster.id')}: {exc}") from exc

    def launch(node_id: int) -> subprocess.Popen[bytes]:
        conf = os.path.join(data_dir, f"node-{node_id}.properties")
        with open(os.path.join(data_dir, "logs", f"node-{node_id}.log"), "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "kraft_spark", "node", "--config", conf],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C reaches us, and we stop them in order
                # killed with SIGKILL, we leave no node behind (kraft_spark.proc_tree)
                env={**os.environ, PARENT_ENV: str(os.getpid())},
            )

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    credentials_path, credentials = _http_credentials(args, data_dir, say)
    auth = _quorum_auth(args, data_dir, tls, say)
    listener_scheme = "SASL_PLAINTEXT://" if auth is not None else ""
    http_auth_property = (f"kraft.http.credentials.file={credentials_path}"
                          if credentials is not None else "kraft.http.insecure=true")

    from kraft_spark.metrics import Registry, app_metric_name

    registry = Registry()  # the sidecar's /metrics, with --http-port
    failures = registry.counter(
        app_metric_name("log-dir-failures-total"),
        "Times a node stopped on a log directory failure (exit 74) and was restarted, by node.",
        ("node_id",))
    supervisor = NodeSupervisor(launch, say,
                                on_storage_failure=lambda n: failures.labels(n).inc())
    stop = StopSignals()
    stop.install()
    sidecar: Any = None
    front: Any = None
    etcd_front: Any = None
    try:
        procs: dict[int, subprocess.Popen[bytes]] = {}
        for node_id, port in enumerate(ports):
            log_dir = os.path.join(data_dir, f"node-{node_id}")
            try:
                format_log_dir(log_dir, cluster_id=cluster_id, node_id=node_id,
                               ignore_formatted=True)
            except (LogError, ValueError, OSError) as exc:
                if not is_disk_failure(exc):
                    raise CommandError(str(exc)) from exc
                # A disk that fails now may work later: the node gets the same chance as one
                # that fails while running (it exits 74 and is restarted with backoff).
                say(f"node {node_id}: {log_dir}: {exc}; starting it anyway")
            conf = os.path.join(data_dir, f"node-{node_id}.properties")
            http_port = http_ports[node_id]
            node_props = [f"kraft.cpu.affinity={args.cpu_affinity}"]
            if auth is not None:
                node_props += auth.node_properties()
            if http_port is not None:
                node_props.append(f"kraft.http.listener={quorum_host}:{http_port}")
                node_props.append(http_auth_property)
            node_props += etcd_properties(quorum_host, etcd, node_id)
            with open(conf, "w", encoding="utf-8") as fh:
                fh.write(
                    f"node.id={node_id}\nlog.dirs={log_dir}\n"
                    f"listeners={listener_scheme}{quorum_host}:{port}\n"
                    f"controller.quorum.voters={voters}\n"
                    + "".join(e + "\n" for e in node_props + extra)
                )
            procs[node_id] = supervisor.start(node_id)
        for node_id, port in enumerate(ports):
            conf = os.path.join(data_dir, f"node-{node_id}.properties")
            log_path = os.path.join(data_dir, "logs", f"node-{node_id}.log")
            http_port, proc = http_ports[node_id], procs[node_id]
            line: dict[str, Any] = {"node_id": node_id, "endpoint": f"{quorum_host}:{port}",
                                    "pid": proc.pid,
                                    "log_dir": os.path.join(data_dir, f"node-{node_id}")}
            try:
                _wait_listening(args.host, port, proc, log_path)
                if http_port is not None:
                    # The node binds its HTTP port after its quorum port.
                    _wait_listening(args.host, http_port, proc, log_path)
                    line["http"] = http_url(args.host, http_port)
                if etcd[node_id] is not None:
                    _wait_listening(args.host, etcd[node_id] or 0, proc, log_path)
                    line["etcd"] = f"{quorum_host}:{etcd[node_id]}"
            except CommandError as exc:
                # One node that cannot start does not stop the others (a damaged
                # quorum-state, say: the node's log names the file and the fix).
                say(f"{exc}; the other nodes go on (restart this one with "
                    f"`kraft-spark node --config {conf}` once fixed)")
                line["error"] = str(exc)
            print(json.dumps(line), flush=True)
        if args.http_port is not None:
            from kraft_spark.commands.local_front import start_front
            from kraft_spark.commands.sidecar import start_sidecar

            etcd_front = start_etcd_front(args, quorum_host, etcd, tls=tls, say=say)
            urls = {i: http_url(args.host, p)
                    for i, p in enumerate(http_ports) if p is not None}
            bootstrap = [f"{quorum_host}:{p}" for p in ports]
            # With the nodes' own HTTP APIs, the address printed is the append router's
            # (kraft_spark/proxy/front.py), the sidecar behind it on a loopback port.
            routed = bool(urls)
            try:
                sidecar = start_sidecar(bootstrap, "127.0.0.1" if routed else args.host,
                                        0 if routed else args.http_port, cluster_id=cluster_id,
                                        credentials=credentials, quorum=_quorum_of(extra),
                                        registry=registry, http_urls=lambda: urls,
                                        security=ClientSecurity(sasl=auth.sasl.client)
                                        if auth is not None else None)
                if routed:
                    front = start_front(args, sidecar.port, bootstrap=bootstrap,
                                        cluster_id=cluster_id, urls=urls,
                                        security=ClientSecurity(sasl=auth.sasl.client)
                                        if auth is not None else None)
            except RuntimeError as exc:
                raise CommandError(str(exc), exit_code=1) from exc
            port = front.port if front is not None else sidecar.port
            address = http_url(args.host, port)
            print(json.dumps({"http": address,
                              **etcd_front_address(etcd_front, quorum_host),
                              "docs": f"{address}/docs",
                              "credentials": credentials_path,
                              **({"command_config": auth.admin_properties}
                                 if auth is not None else {})}), flush=True)
        while not stop.wait(0.2):
            supervisor.poll()
            if supervisor.running() == 0:
                raise CommandError(
                    f"every node exited; see their logs in {os.path.join(data_dir, 'logs')}",
                    exit_code=1,
                )
    finally:
        if etcd_front is not None:
            etcd_front.stop()
        if front is not None:
            front.stop()
        if sidecar is not None:
            sidecar.stop()
        _stop_all(supervisor.procs())
    return 0


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every node (each leader resigns first), then wait; SIGKILL stragglers."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10.0
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _quorum_auth(args: Any, data_dir: str, tls: bool,
                 say: Callable[[str], None]) -> QuorumAuth | None:
    """The listeners' SASL credentials (``quorum_auth``), or None with --quorum-insecure
    (``tls``: the nodes are given a certificate, so mutual TLS still guards them)."""
    if args.quorum_insecure:
        if tls:
            say("--quorum-insecure: no SASL; the listeners take mutual TLS connections only "
                "(a client certificate from ssl.ca.location), and super.users says who may "
                "change the voters")
        else:
            say("--quorum-insecure: the Kafka-protocol listeners take every request without "
                "authentication; anyone on this host can read the log and change the voters")
        return None
    try:
        auth = ensure_quorum_auth(data_dir)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    if auth.created:
        say(f"quorum credentials (SASL/PLAIN) created in {auth.users_file}")
    say(f"clients of the Kafka-protocol listeners: --command-config {auth.admin_properties}")
    return auth


def _http_credentials(args: Any, data_dir: str,
                      say: Callable[[str], None]) -> tuple[str | None, Credentials | None]:
    """The HTTP API's credentials file and what it holds (``--http-credentials``, else
    ``<data-dir>/http-credentials``, created on a first start); (None, None) with
    ``--http-insecure``. Only when an HTTP API is served."""
    if args.http_port is None and args.no_node_http:
        return None, None
    try:
        path, credentials, created = server_credentials(
            path=os.path.abspath(args.http_credentials) if args.http_credentials else None,
            token=None, insecure=args.http_insecure,
            default_path=os.path.join(data_dir, CREDENTIALS_FILE))
    except ConfigError as exc:
        message = str(exc).replace("kraft.http.insecure=true", "--http-insecure")
        raise CommandError(message) from None
    if credentials is None:
        say("--http-insecure: the HTTP API takes every call without credentials")
    elif created:
        say(f"HTTP credentials (admin, write and read tokens) created in {path}")
    return path, credentials
