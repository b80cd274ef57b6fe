"""Shared helpers for tests that run real nodes on loopback."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

from kraft_spark.log.meta import format_log_dir
from kraft_spark.net.cluster_acl import ClusterAcl
from kraft_spark.net.config import NodeConfig
from kraft_spark.net.node import RaftNode
from kraft_spark.protocol.sasl_plain import SaslServerConfig
from kraft_spark.raft.config import QuorumConfig
from kraft_spark.tls_config import TlsConfig

CLUSTER = "test-cluster"
# Short timeouts keep elections quick in tests; still well above loopback latencies.
FAST = QuorumConfig(fetch_timeout_ms=600, election_timeout_ms=300, request_timeout_ms=500,
                    fetch_max_wait_ms=200)
# For tests about something other than elections: an in-process quorum runs its nodes on one
# event loop, which a loaded CI machine can stall for longer than FAST's 600 ms fetch timeout;
# the election that follows answers a write in flight with 504 ("may still commit"), as it
# should, and fails a test that expects the write acknowledged (CI run 31). The first election
# stays as quick (election timeout 300 ms).
STEADY = replace(FAST, fetch_timeout_ms=4000)


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


# Test servers' ports come from just below the kernel's ephemeral range. A port picked by
# binding to 0 lies inside it, and between that check and the server's bind an outgoing
# connection (another node's, a client's) could be given it as its local port: a server then
# failed with "address already in use" (test_storage_faults, once in a full run). Below the
# range no connection is ever given one. Ports are drawn at random (as binding to 0 gives them)
# and never handed out twice in a session.
# Under pytest-xdist each worker draws from a slice of its own: the set of ports handed out is
# per process, so two workers drawing from one pool could hand out the same port (a restart on
# its old port would find it taken).
_POOL_END = _ephemeral_low()
_POOL_START = max(1024, _POOL_END - 12_000)
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_SLICE = (_POOL_END - _POOL_START) // _WORKERS
_POOL_START, _POOL_END = _POOL_START + _WORKER * _SLICE, _POOL_START + (_WORKER + 1) * _SLICE
_handed_out: set[int] = set()


def free_run(n: int) -> int:
    """The first of ``n`` consecutive loopback ports nothing listens on."""
    for _ in range(1000):
        base = random.randrange(_POOL_START, _POOL_END - n)
        run = range(base, base + n)
        if _handed_out.intersection(run) or not all(_bindable(p) for p in run):
            continue
        _handed_out.update(run)
        return base
    raise RuntimeError(f"no {n} consecutive free ports in {_POOL_START}..{_POOL_END - 1}")


def free_ports(n: int) -> list[int]:
    """``n`` loopback ports nothing listens on."""
    return [free_run(1) for _ in range(n)]


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False  # in use, or lingering
    return True


def make_nodes(
    tmp: Path, count: int = 3, *, tls: TlsConfig | None = None, quorum: QuorumConfig = FAST,
    inline_flush_max_ms: float = 2.0, acl: ClusterAcl | None = None,
    sasl: SaslServerConfig | None = None,
) -> list[RaftNode]:
    ports = free_ports(count)
    voters = {i: ("127.0.0.1", p) for i, p in enumerate(ports)}
    nodes = []
    for i in range(count):
        log_dir = str(tmp / f"node-{i}")
        format_log_dir(log_dir, cluster_id=CLUSTER, node_id=i, ignore_formatted=True)
        nodes.append(RaftNode(NodeConfig(i, log_dir, "127.0.0.1", ports[i], voters, quorum,
                                         tls=tls, inline_flush_max_ms=inline_flush_max_ms,
                                         acl=acl or ClusterAcl(), sasl=sasl)))
    return nodes


async def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.01)


async def send_raw(port: int, data: bytes) -> bytes:
    """Send raw bytes to a node; return what comes back before it closes the connection, or
    ``b"(open)"`` when it still holds it open after 1 s."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(65536), 1.0)
    except TimeoutError:
        return b"(open)"
    finally:
        writer.close()


def leader_of(nodes: list[RaftNode]) -> RaftNode | None:
    leaders = [n for n in nodes if n.describe()["role"] == "leader"]
    return leaders[0] if len(leaders) == 1 else None


def the_leader(nodes: list[RaftNode]) -> RaftNode:
    """The one leader among ``nodes``; fails the test when there is none (or two)."""
    leader = leader_of(nodes)
    assert leader is not None, "no single leader among the nodes"
    return leader


async def alone_as_leader(nodes: list[RaftNode]) -> RaftNode:
    """Stops every node but the leader (kill -9 style), so nothing it appends can commit."""
    leader = the_leader(nodes)
    for node in nodes:
        if node is not leader:
            await node.stop(graceful=False)
    return leader


async def run_quorum(
    tmp: Path, body: Callable[[list[RaftNode]], Awaitable[None]], **kwargs: object
) -> None:
    await run_nodes(make_nodes(tmp, **kwargs), body)  # type: ignore[arg-type]


async def run_nodes(
    nodes: list[RaftNode], body: Callable[[list[RaftNode]], Awaitable[None]]
) -> None:
    """Start ``nodes``, wait for a leader, run ``body``; stop them all (not gracefully)."""
    try:
        for node in nodes:
            await node.start()
        await wait_for(lambda: leader_of(nodes) is not None, 10, "a leader")
        await body(nodes)
    finally:
        for node in nodes:
            await node.stop(graceful=False)


def make_certs(directory: Path) -> tuple[TlsConfig, TlsConfig]:
    """A private CA with one node certificate, and a second certificate from another CA."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    for ca in ("ca", "rogue-ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            f"/CN={ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.pem")
    for name, ca in (("node", "ca"), ("rogue", "rogue-ca")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
            f"{name}.key", "-out", f"{name}.csr")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.pem")
    good = TlsConfig(str(directory / "node.pem"), str(directory / "node.key"),
                     str(directory / "ca.pem"))
    rogue = TlsConfig(str(directory / "rogue.pem"), str(directory / "rogue.key"),
                      str(directory / "ca.pem"))
    return good, rogue


def make_client_cert(directory: Path, name: str, subject: str) -> TlsConfig:
    """One more certificate signed by :func:`make_certs`'s CA (run it first), for ``subject``
    (``/OU=ops/CN=admin``: most general first, as a DN is encoded)."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key",
        "-out", f"{name}.csr")
    run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem")
    return TlsConfig(str(directory / f"{name}.pem"), str(directory / f"{name}.key"),
                     str(directory / "ca.pem"))
