"""Real-process quorum harness: ``kraft-spark local`` or hand-started nodes, a load generator
that records every acknowledgement, a TCP proxy that can cut a node off, and a checker that
reads every voter's segment files from disk."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraft_spark.client import ClientError, NewRecord, QuorumClient
from kraft_spark.client.security import ClientSecurity
from kraft_spark.commands.client_cmds import COMMAND_CONFIG_ENV
from kraft_spark.http_auth import CREDENTIALS_FILE, Credentials, Scope
from kraft_spark.log.codec import iter_batches
from kraft_spark.log.errors import CorruptRecordError
from kraft_spark.log.meta import format_log_dir
from kraft_spark.quorum_auth import ADMIN_PROPERTIES, USERS_FILE
from kraft_spark.raft.records import (
    CONTROL_TYPE_LEADER_CHANGE,
    Batch,
    control_type_of,
    decode_leader_change,
)
from tests.net.helpers import free_ports, free_run

# Quicker than Kafka's defaults so each scenario takes seconds, not tens of seconds.
FAST_SETTINGS = {
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.request.timeout.ms": "1000",
}
FETCH_TIMEOUT_S = 1.0


def consecutive_free_ports(n: int) -> int:
    """The first of ``n`` consecutive free ports (``tests.net.helpers.free_run``)."""
    return free_run(n)


@dataclass
class LocalQuorum:
    """``kraft-spark local`` as a child process."""

    data_dir: Path
    voters: int = 3
    proc: subprocess.Popen[str] | None = None
    nodes: list[dict[str, object]] = field(default_factory=list)
    restarted: list[subprocess.Popen[bytes]] = field(default_factory=list)
    http: bool = False
    http_url: str = ""
    # The line `--http-port` prints: "http", "etcd" (the etcd front, with node_http)...
    front: dict[str, object] = field(default_factory=dict)
    # `local`'s default: node i serves the HTTP API itself at http_urls[i], and etcd's API at
    # nodes[i]["etcd"] (a node started again by restart_node keeps its ports, which are in its
    # properties file). False: --no-node-http, the quorum's listeners only (and with `http`,
    # the sidecar alone), lighter for the many tests that need no more.
    node_http: bool = False
    http_urls: list[str] = field(default_factory=list)
    # The admin token of the HTTP credentials `kraft-spark local` created in the data directory
    # (every HTTP API of a local quorum requires one), and the header that carries it.
    token: str | None = None
    # ``--set`` overrides; the fast test timings unless a test wants Kafka's defaults ({}).
    settings: dict[str, str] = field(default_factory=lambda: dict(FAST_SETTINGS))
    # More arguments of `kraft-spark local` (``--quorum-insecure``...).
    args: list[str] = field(default_factory=list)

    def start(self) -> None:
        base = consecutive_free_ports(self.voters)
        cmd = [sys.executable, "-m", "kraft_spark", "local", "--voters", str(self.voters),
               "--data-dir", str(self.data_dir), "--base-port", str(base)]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        cmd += self.args
        if self.http:
            cmd += ["--http-port", "0"]
        if not self.node_http:
            cmd += ["--no-node-http"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        assert self.proc.stdout is not None
        for _ in range(self.voters):
            line = self.proc.stdout.readline()
            assert line, f"kraft-spark local exited early ({self.proc.poll()})"
            node = json.loads(line)
            self.nodes.append(node)
            if self.node_http:
                assert "error" not in node, node
                self.http_urls.append(str(node["http"]))
        if self.http:
            self.front = json.loads(self.proc.stdout.readline())
            self.http_url = str(self.front["http"])
        if self.http or self.node_http:
            credentials = Credentials.load(str(self.data_dir / CREDENTIALS_FILE))
            self.token = credentials.token_of(Scope.ADMIN)

    @property
    def auth(self) -> dict[str, str]:
        """The Authorization header of an admin (``{}`` without an HTTP API)."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @property
    def command_config(self) -> str:
        """The administrator's client properties `kraft-spark local` wrote (SASL/PLAIN)."""
        return str(self.data_dir / ADMIN_PROPERTIES)

    @property
    def auth_args(self) -> list[str]:
        """What a `kraft-spark` client command needs to authenticate to the listeners."""
        return ["--command-config", self.command_config]

    def client(self, bootstrap: list[str] | None = None, **kwargs: Any) -> QuorumClient:
        """A client of the quorum authenticated as its administrator."""
        security = ClientSecurity.from_file(self.command_config)
        return QuorumClient(self.bootstrap if bootstrap is None else bootstrap, **kwargs,
                            **security.client_kwargs())

    @property
    def bootstrap(self) -> list[str]:
        return [str(n["endpoint"]) for n in self.nodes]

    def pid(self, node_id: int) -> int:
        return int(str(self.nodes[node_id]["pid"]))

    def log_dir(self, node_id: int) -> Path:
        return Path(str(self.nodes[node_id]["log_dir"]))

    def restart_node(self, node_id: int) -> subprocess.Popen[bytes]:
        """Start a killed node again (``local`` restarts nothing by itself)."""
        conf = self.data_dir / f"node-{node_id}.properties"
        out = open(self.data_dir / "logs" / f"node-{node_id}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen([sys.executable, "-m", "kraft_spark", "node", "--config",
                                 str(conf)], stdout=out, stderr=subprocess.STDOUT)
        out.close()
        self.nodes[node_id]["pid"] = proc.pid
        self.restarted.append(proc)
        return proc

    def stop(self) -> int:
        """SIGTERM ``local`` (it stops the nodes gracefully); returns its exit code."""
        if self.proc is None:
            return 0
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        for proc in self.restarted:  # nodes restarted by a test are ours to stop
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return code


class Observer:
    """A ``kraft-spark node`` that is not in ``controller.quorum.voters``: it follows the
    quorum as an observer until it is added."""

    def __init__(self, quorum: LocalQuorum, node_id: int, *, bootstrap: bool = False) -> None:
        """``bootstrap``: given ``controller.quorum.bootstrap.servers`` (one node of the
        quorum) instead of the voter list (KIP-853)."""
        data = quorum.data_dir
        cluster = (data / "cluster.id").read_text().strip()
        self.node_id = node_id
        self.log_dir = data / f"node-{node_id}"
        format_log_dir(str(self.log_dir), cluster_id=cluster, node_id=node_id)
        port = free_ports(1)[0]
        self.endpoint = f"127.0.0.1:{port}"
        voters = ",".join(f"{i}@{n['endpoint']}" for i, n in enumerate(quorum.nodes))
        lines = [
            f"node.id={node_id}", "process.roles=controller",
            "controller.listener.names=CONTROLLER",
            f"listeners=CONTROLLER://{self.endpoint}", f"log.dirs={self.log_dir}",
            f"controller.quorum.bootstrap.servers={quorum.nodes[-1]['endpoint']}" if bootstrap
            else f"controller.quorum.voters={voters}",
            *(f"{k}={v}" for k, v in FAST_SETTINGS.items()),
            # The quorum's listeners take SASL/PLAIN: this node authenticates as its nodes do,
            # and add-controller (Kafka's tool and ours read this file as the admin client's
            # configuration too) as the administrator, as a Kafka operator would write it.
            f"kraft.sasl.plain.users.file={data / USERS_FILE}", "super.users=User:admin",
            *(line for line in (data / ADMIN_PROPERTIES).read_text().splitlines()
              if not line.startswith("#")),
        ]
        self.config = data / f"node-{node_id}.properties"
        self.config.write_text("\n".join(lines) + "\n")
        self.config.chmod(0o600)  # it holds the administrator's password
        self.out = open(data / "logs" / f"node-{node_id}.log", "ab")  # noqa: SIM115
        self._start()

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kraft_spark", "node", "--config", str(self.config)],
            stdout=self.out, stderr=subprocess.STDOUT)

    def restart_on_a_new_port(self) -> None:
        """Stop the node and start it again listening elsewhere (same log, same directory)."""
        self.proc.terminate()
        self.proc.wait(10)
        old = self.endpoint
        self.endpoint = f"127.0.0.1:{free_ports(1)[0]}"
        self.config.write_text(self.config.read_text().replace(old, self.endpoint))
        self._start()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.out.close()


class LoadGenerator:
    """Appends unique keys in a thread; records (key → offset) for every acknowledgement."""

    def __init__(self, target: LocalQuorum | list[str], *, batch: int = 1) -> None:
        """``target``: a local quorum (its administrator's client) or the bootstrap of
        hand-started nodes without authentication."""
        timeouts: dict[str, Any] = {"retry_budget_s": 15.0, "request_timeout_s": 2.0}
        self.client = (target.client(**timeouts) if isinstance(target, LocalQuorum)
                       else QuorumClient(target, **timeouts))
        self.acked: dict[bytes, int] = {}
        self.errors: list[str] = []
        self.ack_times: list[tuple[float, int]] = []  # (when, epoch of the batch)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._batch = batch
        self._next = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            keys = [f"w{self._next + i}".encode() for i in range(self._batch)]
            self._next += self._batch
            try:
                result = self.client.append([NewRecord(k, b"x" * 50) for k in keys],
                                            timeout_s=15.0)
            except ClientError as exc:
                self.errors.append(str(exc))
                continue
            now = time.monotonic()
            for i, key in enumerate(keys):
                self.acked[key] = result.base_offset + i
            self.ack_times.append((now, result.epoch))

    def start(self) -> LoadGenerator:
        self._thread.start()
        return self

    def wait_for_acks(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < count:
            assert time.monotonic() < deadline, f"only {len(self.acked)} acks: {self.errors}"
            time.sleep(0.01)

    def first_ack_after(self, t: float, epoch: int, timeout_s: float) -> float:
        """When the first append of an epoch above ``epoch`` was acknowledged after ``t``
        (acknowledgements still in flight from the old leader do not count)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            later = [a for a, e in self.ack_times[-50:] if a > t and e > epoch]
            if later:
                return later[0]
            time.sleep(0.005)
        raise AssertionError(f"no commit within {timeout_s} s: {self.errors[-3:]}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.client.close()


def read_voter_log(log_dir: Path) -> list[Batch]:
    """Every valid batch in a voter's segment files (a torn tail is where reading stops)."""
    pdir = log_dir / "__cluster_metadata-0"
    batches: list[Batch] = []
    for seg in sorted(pdir.glob("*.log")):
        data = seg.read_bytes()
        with contextlib.suppress(CorruptRecordError):
            for batch in iter_batches(data):
                batches.append(batch)
    return batches


def key_offsets(batches: list[Batch]) -> dict[bytes, list[int]]:
    out: dict[bytes, list[int]] = {}
    for batch in batches:
        if batch.is_control:
            continue
        for i, rec in enumerate(batch.records):
            assert rec.key is not None
            out.setdefault(rec.key, []).append(batch.base_offset + i)
    return out


def leaders_by_epoch(batches: list[Batch]) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for batch in batches:
        if batch.is_control and (
                control_type_of(batch.records[0].key) == CONTROL_TYPE_LEADER_CHANGE):
            change = decode_leader_change(batch.records[0].value or b"")
            out.setdefault(batch.epoch, set()).add(change.leader_id)
    return out


def check_acknowledged(acked: dict[bytes, int], log_dirs: list[Path], hw: int) -> None:
    """Every acknowledged append is present exactly once at its offset on every voter."""
    for log_dir in log_dirs:
        batches = read_voter_log(log_dir)
        end = batches[-1].next_offset if batches else 0
        assert end >= hw, f"{log_dir} ends at {end}, below the high watermark {hw}"
        where = key_offsets(batches)
        for key, offset in acked.items():
            assert where.get(key) == [offset], (
                f"{log_dir}: acknowledged {key!r} at {offset}, log has {where.get(key)}"
            )
        for epoch, leaders in leaders_by_epoch(batches).items():
            assert len(leaders) == 1, f"{log_dir}: epoch {epoch} has leaders {leaders}"


def wait_replicated(client: QuorumClient, voters: int, timeout_s: float = 20.0) -> int:
    """Wait until every voter's log end reached the high watermark; return it."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = client.describe_quorum()
        ends = [v.log_end_offset for v in info.voters]
        if len(ends) == voters and min(ends) >= info.high_watermark:
            return info.high_watermark
        assert time.monotonic() < deadline, f"voters did not catch up: {info}"
        time.sleep(0.1)


def leader_id(client: QuorumClient) -> int:
    return client.describe_quorum().leader_id


def leader_and_epoch(client: QuorumClient) -> tuple[int, int]:
    info = client.describe_quorum()
    return info.leader_id, info.leader_epoch


@contextlib.contextmanager
def running(quorum: LocalQuorum) -> Iterator[LocalQuorum]:
    """``quorum`` started; `kraft-spark` commands run meanwhile authenticate as its
    administrator (``KRAFT_SPARK_COMMAND_CONFIG``, as a user sets it once per shell)."""
    before = os.environ.get(COMMAND_CONFIG_ENV)
    quorum.start()
    os.environ[COMMAND_CONFIG_ENV] = quorum.command_config
    try:
        yield quorum
    finally:
        if before is None:
            os.environ.pop(COMMAND_CONFIG_ENV, None)
        else:
            os.environ[COMMAND_CONFIG_ENV] = before
        assert quorum.stop() == 0, "kraft-spark local did not exit 0 on SIGTERM"


def store_ready(quorum: LocalQuorum, timeout_s: float = 30.0) -> None:
    """Until the store takes a write through the nodes' own HTTP APIs (``node_http``): a
    leader is elected and its first record committed."""
    from kraft_spark.client.kv import KvClient, KvError

    with KvClient(quorum.http_urls, token=quorum.token, timeout_s=5) as kv:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                kv.put("_ready", 1)
                return
            except (KvError, OSError):
                assert time.monotonic() < deadline, f"no leader in {timeout_s} s"
                time.sleep(0.2)


class CuttableProxy:
    """A TCP proxy ``listen_port → target_port`` that can drop everything and heal."""

    def __init__(self, listen_port: int, target_port: int) -> None:
        self.listen_port, self.target_port = listen_port, target_port
        self.cut = False
        self._socks: list[socket.socket] = []
        self._server = socket.create_server(("127.0.0.1", listen_port), reuse_port=False)
        self._server.settimeout(0.2)
        self._alive = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self._alive:
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.cut:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), 1.0)
            except OSError:
                client.close()
                continue
            self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.cut:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()

    def set_cut(self, cut: bool) -> None:
        self.cut = cut
        if cut:
            for s in self._socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
            self._socks.clear()

    def close(self) -> None:
        self._alive = False
        self.set_cut(True)
        self._server.close()
