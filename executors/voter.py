"""One Raft voter per barrier task (docs/concepts/architecture.md, the Spark application).

``voter_task(settings)`` returns the function given to
``sc.parallelize(range(V), V).barrier().mapPartitions(...)``. Each task:

1. takes its partition id as voter id and its log directory ``<log_root>/node-<id>`` (stable
   across generations), formatting it on first use;
2. decides whether the disk was lost: the driver passes the directory id each voter had last
   time; a missing or different directory id means this voter may have voted with state it no
   longer has, so it catches up before voting (``disk_lost``);
3. exchanges real endpoints with ``BarrierTaskContext.allGather`` (the addresses in
   ``getTaskInfos()`` are the executors', not ours);
4. runs a ``RaftNode`` (waiting for the previous generation's directory lock, if any), reports
   itself to the driver over the driver's control channel, and serves until the driver says
   ``stop`` or the channel drops (a driver that died must not leave voters behind);
5. stops gracefully (a leader resigns with EndQuorumEpoch, the log is flushed, the lock
   released) and returns one JSON row describing where it ran.

Spark kills a cancelled task with SIGKILL and no notice: that is a crash, and the
log's recovery handles it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from kraft_spark import aio
from kraft_spark.http_auth import Credentials
from kraft_spark.net.tls_bundle import TlsBundle
from kraft_spark.protocol.sasl_plain import SaslServerConfig
from kraft_spark.tls_config import TlsConfig

log = logging.getLogger("kraft_spark.executor")


@dataclass(frozen=True)
class VoterSettings:
    """Everything a voter task needs, shipped to executors in the task closure."""

    cluster_id: str
    voters: int
    log_root: str
    control_host: str
    control_port: int
    generation: int
    base_port: int = 0  # voter i listens on base_port + i; 0: any free port
    bind_host: str = ""  # "" : this executor's address (127.0.0.1 in local mode)
    quorum_properties: dict[str, str] = field(default_factory=dict)
    inline_flush_max_ms: float = 2.0  # kraft.log.flush.inline.max.ms
    log_preallocate: bool = True  # kraft.log.preallocate
    known_directory_ids: dict[int, str] = field(default_factory=dict)
    lock_timeout_s: float = 120.0
    # KIP-853: the tasks below this id form the static voter set (the application's first
    # --voters, kept in its data directory); the others start as observers and the driver
    # adds them (driver/voter_reconcile.py). 0: every task.
    static_voters: int = 0
    # The HTTP API each voter serves itself (kraft.voter.http.base.port): voter i on
    # http_base_port + i, 0: any free port, -1: none. The leader's takes appends with no hop.
    http_base_port: int = -1
    # etcd's v3 API each voter serves beside its HTTP API, sharing its store and credentials
    # (kraft.voter.etcd.base.port): voter i on etcd_base_port + i, 0: any free port, -1: none
    # (none either without the voter's HTTP API).
    etcd_base_port: int = -1
    http_credentials: Credentials | None = None
    http_max_connections: int = 1000
    http_header_timeout_ms: int = 10_000
    # kraft.cpu.affinity of the voters ("role": the leader on the lower half of the CPUs, the
    # others on the upper half, as `kraft-spark local` places its nodes on one machine)
    cpu_affinity: str = "none"
    # SASL/PLAIN on the listeners (the users of the driver's <data-dir>/quorum-users, shipped
    # in the task closure as the HTTP credentials are); None: no authentication.
    sasl: SaslServerConfig | None = None
    # Mutual TLS on the listeners: the driver's PEM files, written beside the voter's log.
    tls: TlsBundle | None = None


def _host(settings: VoterSettings, ctx: Any = None) -> str:
    """Where the voter listens: the configured host, else the address Spark knows this task's
    executor by (on a multi-host rig each worker binds its own), else this host's name."""
    if settings.bind_host:
        return settings.bind_host
    if ctx is not None and _executor_host(ctx):
        return _executor_host(ctx)
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _port(host: str, base_port: int, voter_id: int) -> int:
    if base_port:
        return base_port + voter_id
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _log_root(settings: VoterSettings) -> str:
    """The voters' log root on this host (``kraft.voter.log.dir`` may name environment
    variables and ``~``, expanded here)."""
    return os.path.expanduser(os.path.expandvars(settings.log_root))


def prepare_log_dir(settings: VoterSettings, voter_id: int) -> tuple[str, str, bool, bool]:
    """Format on first use; return ``(log_dir, directory_id, disk_lost, fresh)``; ``fresh``:
    formatted now (no log was there: a new or a lost disk). ``log_root`` may name environment
    variables, expanded on this host (kraft.voter.log.dir)."""
    from kraft_spark.log.meta import format_log_dir, read_meta_properties

    log_dir = os.path.join(_log_root(settings), f"node-{voter_id}")
    known = settings.known_directory_ids.get(voter_id)
    meta = read_meta_properties(log_dir)
    fresh = meta is None
    if meta is None:
        meta = format_log_dir(log_dir, cluster_id=settings.cluster_id, node_id=voter_id,
                              ignore_formatted=True, lock_timeout_s=settings.lock_timeout_s)
    disk_lost = known is not None and known != meta.directory_id
    if disk_lost:
        log.warning("voter %d: directory id changed (%s -> %s): the disk was lost; it will "
                    "catch up before it votes", voter_id, known, meta.directory_id)
    return log_dir, meta.directory_id, disk_lost, fresh


# A voter whose node stops on a storage failure, or cannot start, is started again inside its
# task after a doubling backoff: failing the task would fail the barrier stage, and with it every
# other voter (one node failing never stops the others).
RESTART_FIRST_S = 1.0
UNHOSTED = ("127.0.0.1", 9)  # the discard port: connections are refused
RESTART_MAX_S = 30.0


async def _serve(settings: VoterSettings, config: Any, hello: dict[str, Any]) -> dict[str, Any]:
    from executors.restore_disk import await_start
    from kraft_spark.log.errors import LogError
    from kraft_spark.net.node import RaftNode

    reader, writer = await asyncio.open_connection(settings.control_host, settings.control_port)
    writer.write((json.dumps(hello) + "\n").encode())
    await writer.drain()
    backoff, failures, reason, summary = RESTART_FIRST_S, 0, "driver gone", {}
    if hello.get("error") or hello.get("fresh"):
        # A fresh disk waits for the driver: start empty, or from the warehouse (restore)
        try:
            decision = "stop" if hello.get("error") else await await_start(reader,
                                                                           config.log_dir)
        except (ValueError, OSError, asyncio.IncompleteReadError) as exc:
            decision, reason = "stop", f"could not start: {exc}"
        if decision == "stop":
            if hello.get("error"):
                await reader.readline()  # the driver stops the application
            writer.close()
            return {**hello, "stopped": reason, "final": {}}
        if decision != "start":
            config = replace(config, disk_lost=False)  # the quorum is rebuilt: vote at once
    command = asyncio.ensure_future(reader.readline())
    node: RaftNode | None = None
    from api.node_http import serve_node_http
    from kraft_spark.store.lease_expiry import LeaseExpirer

    http = serve_node_http if config.http_listener is not None else None
    while True:
        node = RaftNode(config, lock_timeout_s=settings.lock_timeout_s, http=http)
        try:
            await node.start()
        except (LogError, OSError, ValueError) as exc:
            failures += 1
            log.error("voter %d could not start (failure %d in a row): %s; starting it again "
                      "in %.0f s, the other voters go on", config.node_id, failures, exc, backoff)
            node = None
        else:
            started = asyncio.get_running_loop().time()
            expirer = LeaseExpirer(node).start()  # acts only while this voter leads
            closed = asyncio.ensure_future(node.wait_closed())
            await asyncio.wait({closed, command}, return_when=asyncio.FIRST_COMPLETED)
            expirer.stop()
            if command.done():
                closed.cancel()
                break
            if asyncio.get_running_loop().time() - started > 60:
                backoff, failures = RESTART_FIRST_S, 0  # it ran for a while: start afresh
            failures += 1
            log.error("voter %d stopped: %s; starting it again in %.0f s, the other voters go "
                      "on", config.node_id, closed.exception(), backoff)
            node = None
        await asyncio.wait({command}, timeout=backoff)
        if command.done():
            break
        backoff = min(RESTART_MAX_S, backoff * 2)
    if command.done() and command.result():
        reason = "driver asked to stop"
    if node is not None:
        summary = node.describe()
        await node.stop(graceful=True)
    elif failures:
        reason = f"{reason} (the node was not running: {failures} failed start(s) or stop(s))"
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return {**hello, "stopped": reason, "final": summary}


def voter_task(settings: VoterSettings) -> Callable[[Iterator[Any]], Iterator[str]]:
    """The barrier ``mapPartitions`` function hosting one voter per task."""

    def run(_: Iterator[Any]) -> Iterator[str]:
        from pyspark import BarrierTaskContext

        from kraft_spark.gc_tuning import tune_for_serving
        from kraft_spark.log.errors import LogError
        from kraft_spark.net.config import NodeConfig
        from kraft_spark.quorum_auth import listener_fields
        from kraft_spark.raft.config import QuorumConfig
        from kraft_spark.state.policy import SnapshotConfig

        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        tune_for_serving()
        ctx = BarrierTaskContext.get()
        voter_id = ctx.partitionId()
        error = ""
        try:
            log_dir, directory_id, disk_lost, fresh = prepare_log_dir(settings, voter_id)
        except (OSError, LogError) as exc:  # reported to the driver, which names the fix
            log_dir, directory_id, disk_lost, fresh = "", "", False, False
            error = f"{type(exc).__name__}: {exc}"
        host = _host(settings, ctx)
        port = _port(host, settings.base_port, voter_id)
        me = {"voter_id": voter_id, "host": host, "port": port, "directory_id": directory_id}
        if settings.http_base_port >= 0:
            url_host = f"[{host}]" if ":" in host else host
            http_port = _port(host, settings.http_base_port, voter_id)
            me["http"] = f"http://{url_host}:{http_port}"
            if settings.etcd_base_port >= 0:
                etcd_port = _port(host, settings.etcd_base_port, voter_id)
                # Two free ports asked for: the OS may hand the first out again (fixed bases
                # that overlap are refused by the driver's configuration).
                while settings.etcd_base_port == 0 and etcd_port == http_port:
                    etcd_port = _port(host, settings.etcd_base_port, voter_id)
                me["etcd"] = f"{url_host}:{etcd_port}"
        everyone = [json.loads(item) for item in ctx.allGather(json.dumps(me))]
        everywhere = {int(v["voter_id"]): (str(v["host"]), int(v["port"])) for v in everyone}
        static = settings.static_voters or len(everywhere)
        # A static voter no task hosts now (a smaller --voters before its removal committed)
        # keeps its place in the static set at an address where nothing listens.
        voters = {i: everywhere.get(i, UNHOSTED) for i in range(static)}
        config = NodeConfig(
            node_id=voter_id, log_dir=log_dir, host=host, port=port, voters=voters,
            addresses={i: a for i, a in everywhere.items() if i >= static},
            quorum=QuorumConfig.from_properties(settings.quorum_properties),
            disk_lost=disk_lost,
            inline_flush_max_ms=settings.inline_flush_max_ms,
            log_preallocate=settings.log_preallocate,
            snapshots=SnapshotConfig.from_properties(settings.quorum_properties),
            cpu_affinity=settings.cpu_affinity,
            **listener_fields(settings.sasl, _install_tls(settings)),
            **_http_settings(settings, me, everyone),
        )
        hello = {
            **me,
            "generation": settings.generation,
            "executor_id": _executor_id(),
            "pid": os.getpid(),
            "attempt": ctx.attemptNumber(),
            "disk_lost": disk_lost,
            "fresh": fresh,
            "executor_host": _executor_host(ctx),
            **({"error": error, "log_dir": settings.log_root} if error else {}),
        }
        result = aio.run(_serve(settings, config, hello))
        yield json.dumps(result)

    return run


def _install_tls(settings: VoterSettings) -> TlsConfig | None:
    """The TLS files shipped by the driver, written under the log root (``tls/``)."""
    if settings.tls is None:
        return None
    return settings.tls.install(os.path.join(_log_root(settings), "tls"))


def _http_settings(settings: VoterSettings, me: dict[str, Any],
                   everyone: list[dict[str, Any]]) -> dict[str, Any]:
    """The NodeConfig fields of the voter's own HTTP API (none without a URL) and of etcd's
    beside it (``me["etcd"]``; every voter's, for MemberList)."""
    if "http" not in me:
        return {}
    port = int(str(me["http"]).rsplit(":", 1)[1])
    etcd: dict[str, Any] = {}
    if "etcd" in me:  # etcd's API shares the HTTP API's store and credentials
        etcd = {"etcd_listener": (str(me["host"]), int(str(me["etcd"]).rsplit(":", 1)[1])),
                "etcd_urls": {int(v["voter_id"]): str(v["etcd"]) for v in everyone
                              if "etcd" in v}}
    return {
        **etcd,
        "http_listener": (str(me["host"]), port),
        "http_credentials": settings.http_credentials,
        "http_max_connections": settings.http_max_connections,
        "http_header_timeout_ms": settings.http_header_timeout_ms,
        "http_urls": {int(v["voter_id"]): str(v["http"]) for v in everyone if "http" in v},
    }


def _executor_host(ctx: Any) -> str:
    """The host Spark's scheduler knows this task's executor by (its preferred locations name
    hosts the same way)."""
    if os.environ.get("SPARK_LOCAL_IP"):  # the address the worker was started with
        return os.environ["SPARK_LOCAL_IP"]
    try:  # else the executor's address as the driver sees its connection
        address = str(ctx.getTaskInfos()[ctx.partitionId()].address)
    except Exception:  # not in a barrier task
        return ""
    return address.rsplit(":", 1)[0] if ":" in address else address


def _executor_id() -> str:
    """Spark does not tell a Python worker its executor id; the JVM's process id (our parent's
    parent: executor JVM -> python daemon -> this worker) identifies it on one host."""
    return os.environ.get("SPARK_EXECUTOR_ID") or f"jvm-pid-{_grandparent_pid()}"


def _grandparent_pid() -> int:
    from kraft_spark.proc_tree import parent_of

    return parent_of(os.getppid())

