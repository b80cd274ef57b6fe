"""``kraft-spark bench gray``: from a leader fault to the next acknowledged append, on every
client path.

Faults, each on the leader of the moment, under a steady load of single-record appends
(``WRITERS`` sequential writers per path):

* ``kill``: kill -9 (the connection resets: the easy case);
* ``freeze``: SIGSTOP for ``--freeze-seconds``, then SIGCONT (a GC pause, a stalled VM);
* ``cut``: the leader's answers dropped on loopback (``iptables -A OUTPUT -o lo -p tcp
  --sport <leader port> -j DROP``) for ``--freeze-seconds``: requests reach it, nothing comes
  back, nothing resets. Needs root and iptables; skipped with the reason otherwise.

Paths: ``native`` (``kraft_spark.client.QuorumClient`` on the voters), ``sidecar`` (the HTTP
API of ``kraft-spark local --http-port``), ``app`` (the Spark application's endpoint, with
``--app``; it starts Spark). The figure per path is the time from the fault to the first
append acknowledged in a later epoch than the faulted leader's; answers still in flight from
the old leader do not count. At the end every acknowledged append is looked up in the log:
lost (not at its acknowledged offset) and duplicated (a key written twice) are counted.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.processes import stop_group
from kraft_spark.client import NewRecord, QuorumClient
from kraft_spark.client.errors import ClientError
from kraft_spark.client.security import ClientSecurity
from kraft_spark.client.types import QuorumInfo
from kraft_spark.http_auth import Scope, token_in

WRITERS = 4
RESUME_TIMEOUT_S = 30.0
Log = Callable[[str], None]


@dataclass
class Acks:
    """Acknowledged appends of one path: (when, epoch) and key → offset."""

    times: list[tuple[float, int]] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    slowest_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, key: str, offset: int, epoch: int, started: float) -> None:
        now = time.monotonic()
        with self.lock:
            self.times.append((now, epoch))
            self.offsets[key] = offset
            self.slowest_s = max(self.slowest_s, now - started)

    def first_after(self, t: float, epoch: int) -> float | None:
        with self.lock:
            later = [a for a, e in self.times[-200:] if a > t and e > epoch]
        return min(later) if later else None


class Appender:
    """Appends one record under ``key`` from any of several threads: (offset, epoch)."""

    def __call__(self, key: str) -> tuple[int, int]:
        raise NotImplementedError

    def close(self) -> None:
        """Close every connection the threads opened."""


class NativeAppender(Appender):
    """One ``QuorumClient`` per writer thread, on the voters."""

    def __init__(self, bootstrap: list[str], security: ClientSecurity) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._local = threading.local()
        self._clients: list[QuorumClient] = []

    def __call__(self, key: str) -> tuple[int, int]:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = QuorumClient(self._bootstrap, retry_budget_s=30.0,
                                                       **self._security.client_kwargs())
            self._clients.append(client)
        result = client.append([NewRecord(key.encode(), b"x" * 100)], timeout_s=30.0)
        return result.base_offset, result.epoch

    def close(self) -> None:
        for client in self._clients:
            client.close()


class HttpAppender(Appender):
    """``POST /v1/records`` on one keep-alive connection per writer thread."""

    def __init__(self, url: str, token: str | None = None) -> None:
        parts = urlsplit(url)
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port
        self._local = threading.local()
        self._conns: list[http.client.HTTPConnection] = []

    def __call__(self, key: str) -> tuple[int, int]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(self._host, self._port,
                                                                 timeout=60)
            self._conns.append(conn)
        body = json.dumps({"key": key, "value": "x" * 100}).encode()
        try:
            conn.request("POST", "/v1/records", body,
                         {"Content-Type": "application/json", **self._auth})
            response = conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            conn.close()  # reconnects on the next request
            raise
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {raw[:200]!r}")
        answer = json.loads(raw)
        return int(answer["base_offset"]), int(answer["epoch"])

    def close(self) -> None:
        for conn in self._conns:
            conn.close()


class Writers:
    """``WRITERS`` threads appending unique keys through ``appender``."""

    def __init__(self, name: str, appender: Appender) -> None:
        self.name = name
        self.acks = Acks()
        self._appender = appender
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,), daemon=True)
                         for n in range(WRITERS)]
        for thread in self._threads:
            thread.start()

    def _run(self, n: int) -> None:
        i = 0
        while not self._stop.is_set():
            key = f"{self.name}-{n}-{i}"
            i += 1
            started = time.monotonic()
            try:
                offset, epoch = self._appender(key)
            except Exception as exc:  # an honest failure (504, no leader): counted, not lost
                self.acks.errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.05)
                continue
            self.acks.add(key, offset, epoch, started)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        self._appender.close()


# ---------------------------------------------------------------------------- the systems


def _listening_pid(port: int) -> int:
    """The pid of the process listening on ``port`` (``ss -ltnpH``)."""
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True,
                         check=True, timeout=10).stdout
    marker = "pid="
    if marker not in out:
        raise RuntimeError(f"no process listens on port {port}: {out.strip()!r}")
    return int(out.split(marker, 1)[1].split(",", 1)[0])


class LocalSystem:
    """``kraft-spark local --voters 3 --http-port 0 --no-node-http`` (the sidecar alone at
    the HTTP address) with Kafka's default timings."""

    name = "local"

    def __init__(self, data_dir: Path, base_port: int) -> None:
        self.data_dir = data_dir
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kraft_spark", "local", "--voters", "3", "--data-dir",
             str(data_dir), "--base-port", str(base_port), "--http-port", "0",
             "--no-node-http"],
            stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert self.proc.stdout is not None
        self.nodes = [json.loads(self.proc.stdout.readline()) for _ in range(3)]
        sidecar = json.loads(self.proc.stdout.readline())
        self.http_url: str = sidecar["http"]
        self.token = token_in(sidecar["credentials"], Scope.WRITE)
        self.security = ClientSecurity.from_file(sidecar["command_config"])
        self.bootstrap = [str(n["endpoint"]) for n in self.nodes]
        self._restarted: list[subprocess.Popen[bytes]] = []

    def port(self, node_id: int) -> int:
        return int(str(self.nodes[node_id]["endpoint"]).rsplit(":", 1)[1])

    def pid(self, node_id: int) -> int:
        return int(self.nodes[node_id]["pid"])

    def after_kill(self, node_id: int) -> None:
        """``local`` restarts nothing by itself: start the killed node again."""
        with open(self.data_dir / "logs" / f"node-{node_id}.log", "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "kraft_spark", "node", "--config",
                                     str(self.data_dir / f"node-{node_id}.properties")],
                                    stdout=out, stderr=subprocess.STDOUT)
        self.nodes[node_id]["pid"] = proc.pid
        self._restarted.append(proc)

    def stop(self) -> None:
        stop_group(self.proc, 30)
        for proc in self._restarted:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)


class AppSystem:
    """``kraft-spark run`` (the Spark application, local mode, 3 voters, Kafka's timings)."""

    name = "app"

    def __init__(self, data_dir: Path, base_port: int, http_port: int) -> None:
        conf = data_dir / "app.properties"
        conf.write_text(f"kraft.voter.base.port={base_port}\n")
        self._base = base_port
        self._log = open(data_dir / "app.log", "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kraft_spark", "run", "--data-dir", str(data_dir / "app"),
             "--http-port", str(http_port), "--config", str(conf)],
            stdout=subprocess.PIPE, stderr=self._log, text=True, start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the application did not start; see {data_dir}/app.log")
        summary = json.loads(line)
        self.http_url: str = summary["http"]
        self.token = token_in(summary["credentials"], Scope.WRITE)
        self.security = ClientSecurity.from_file(summary["command_config"])
        self.bootstrap = [f"127.0.0.1:{base_port + i}" for i in range(3)]

    def port(self, node_id: int) -> int:
        return self._base + node_id

    def pid(self, node_id: int) -> int:
        return _listening_pid(self.port(node_id))

    def after_kill(self, node_id: int) -> None:
        """The driver relaunches the voters' barrier stage by itself."""

    def stop(self) -> None:
        stop_group(self.proc, 180)
        self._log.close()


System = LocalSystem | AppSystem


# ---------------------------------------------------------------------------- the faults


def cut_unavailable() -> str | None:
    """Why the ``cut`` fault cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (iptables)"
    if shutil.which("iptables") is None:
        return "iptables is not installed (apt-get install iptables)"
    probe = subprocess.run(["iptables", "-S", "OUTPUT"], capture_output=True, text=True,
                           timeout=10, check=False)
    if probe.returncode != 0:
        return f"iptables does not work here: {probe.stderr.strip()}"
    return None


@contextlib.contextmanager
def answers_cut(port: int) -> Iterator[None]:
    """Drop every TCP segment sent from loopback port ``port`` while in the block."""
    rule = ["OUTPUT", "-o", "lo", "-p", "tcp", "--sport", str(port), "-j", "DROP"]
    subprocess.run(["iptables", "-I", *rule], check=True, timeout=10)
    try:
        yield
    finally:
        subprocess.run(["iptables", "-D", *rule], check=True, timeout=10)


def _leader(client: QuorumClient) -> tuple[int, int]:
    """The leader of the highest epoch any node knows. Not simply DescribeQuorum: a leader
    that was cut off and has not heard of its successor yet still answers it as the leader of
    its old epoch (until check-quorum makes it resign)."""
    deadline = time.monotonic() + RESUME_TIMEOUT_S
    while time.monotonic() < deadline:
        views = [v for v in client.leader_views().values() if v[0] >= 0]
        if views:
            return max(views, key=lambda v: v[1])
        time.sleep(0.1)
    raise RuntimeError(f"no node named a leader within {RESUME_TIMEOUT_S:.0f} s")


def _describe(system: System, client: QuorumClient) -> QuorumInfo:
    """DescribeQuorum from the leader of the highest epoch (see :func:`_leader`)."""
    leader, _ = _leader(client)
    with QuorumClient([system.bootstrap[leader]], retry_budget_s=5.0,
                      **system.security.client_kwargs()) as direct:
        return direct.describe_quorum()


def _wait_settled(system: System, client: QuorumClient, timeout_s: float = 60.0) -> None:
    """Every voter holds the high watermark (the faulted one caught up again)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ClientError):
            info = _describe(system, client)
            if len(info.voters) == 3 and all(v.log_end_offset >= info.high_watermark
                                             for v in info.voters):
                return
        time.sleep(0.2)
    raise RuntimeError(f"the quorum did not settle within {timeout_s:.0f} s")


def run_fault(fault: str, system: System, client: QuorumClient, writers: list[Writers], *,
              hold_s: float, log: Log) -> dict[str, Any]:
    """One fault on the current leader; the time to the first later-epoch ack per path."""
    leader, epoch = _leader(client)
    pid, port = system.pid(leader), system.port(leader)
    log(f"{fault}: leader {leader} (epoch {epoch}, pid {pid}, port {port})")
    for w in writers:
        w.acks.slowest_s = 0.0
    resumed: dict[str, float | None] = {w.name: None for w in writers}

    def wait_resumed(until: float) -> None:
        while time.monotonic() < until and None in resumed.values():
            for w in writers:
                if resumed[w.name] is None:
                    at = w.acks.first_after(hit, epoch)
                    if at is not None:
                        resumed[w.name] = at - hit
            time.sleep(0.005)

    hit = time.monotonic()
    if fault == "kill":
        os.kill(pid, signal.SIGKILL)
        wait_resumed(hit + RESUME_TIMEOUT_S)
        system.after_kill(leader)
    elif fault == "freeze":
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_resumed(hit + hold_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_resumed(hit + RESUME_TIMEOUT_S)
    elif fault == "cut":
        with answers_cut(port):
            wait_resumed(hit + hold_s)
        wait_resumed(hit + RESUME_TIMEOUT_S)
    else:
        raise ValueError(f"unknown fault {fault!r}")
    _wait_settled(system, client)
    row: dict[str, Any] = {"fault": fault, "held_s": hold_s if fault != "kill" else None}
    for w in writers:
        row[w.name] = None if resumed[w.name] is None else round(resumed[w.name] or 0.0, 3)
        row[f"{w.name}_slowest_s"] = round(w.acks.slowest_s, 3)
    log("  " + ", ".join(f"{w.name} resumed after {row[w.name]} s (slowest append "
                         f"{row[w.name + '_slowest_s']} s)" for w in writers))
    return row


def check_log(system: System, client: QuorumClient,
              writers: list[Writers]) -> dict[str, int]:
    """Every acknowledged append at its offset, and no key twice."""
    hw = _describe(system, client).high_watermark
    seen: dict[str, list[int]] = {}
    offset = 0
    while offset < hw:
        page = client.read(offset, 5000)
        if not page:
            break
        for record in page:
            if record.key is not None:
                seen.setdefault(record.key.decode(), []).append(record.offset)
        offset = page[-1].offset + 1
    lost = sum(1 for w in writers for key, at in w.acks.offsets.items()
               if at not in seen.get(key, []))
    duplicated = sum(1 for offsets in seen.values() if len(offsets) > 1)
    acked = sum(len(w.acks.offsets) for w in writers)
    return {"acknowledged": acked, "lost": lost, "duplicated": duplicated}


def run_gray(faults: list[str], app: bool, hold_s: float, base_port: int,
             log: Log) -> dict[str, Any]:
    reason = cut_unavailable()
    if "cut" in faults and reason is not None:
        log(f"cut: skipped ({reason})")
        faults = [f for f in faults if f != "cut"]
    results: dict[str, Any] = {"hold_s": hold_s, "systems": {}, "skipped": {}}
    if reason is not None:
        results["skipped"]["cut"] = reason
    systems: list[Callable[[Path], System]] = [lambda d: LocalSystem(d, base_port)]
    if app:
        systems.append(lambda d: AppSystem(d, base_port + 20, base_port + 30))
    for make in systems:
        with tempfile.TemporaryDirectory(prefix="kraft-gray-") as tmp:
            system = make(Path(tmp))
            log(f"{system.name}: started; writers on "
                + ("native and sidecar" if system.name == "local" else "the app's endpoint"))
            client = QuorumClient(system.bootstrap, retry_budget_s=30.0,
                                  **system.security.client_kwargs())
            writers = ([Writers("native", NativeAppender(system.bootstrap, system.security))]
                       if system.name == "local" else [])
            writers.append(Writers("sidecar" if system.name == "local" else "app",
                                   HttpAppender(system.http_url, system.token)))
            rows: list[dict[str, Any]] = []
            try:
                time.sleep(2.0)  # the load runs before the first fault
                for fault in faults:
                    rows.append(run_fault(fault, system, client, writers, hold_s=hold_s, log=log))
            finally:
                for w in writers:
                    w.stop()
            checked = check_log(system, client, writers)
            client.close()
            system.stop()
            log(f"{system.name}: {checked}")
            results["systems"][system.name] = {"rows": rows, "check": checked,
                                               "errors": sum(len(w.acks.errors)
                                                             for w in writers)}
    return results


def format_table(results: dict[str, Any]) -> str:
    lines = ["| system | fault | path | fault → next acknowledged append | slowest append |",
             "| --- | --- | --- | --- | --- |"]
    for name, system in results["systems"].items():
        for row in system["rows"]:
            for path in ("native", "sidecar", "app"):
                if path in row:
                    took = "not within 30 s" if row[path] is None else f"{row[path]:.2f} s"
                    lines.append(f"| {name} | {row['fault']} | {path} | {took} | "
                                 f"{row[path + '_slowest_s']:.2f} s |")
        check = system["check"]
        lines.append(f"| {name} | (all) | lost / duplicated of {check['acknowledged']} "
                     f"acknowledged | {check['lost']} / {check['duplicated']} | |")
    for fault, reason in results["skipped"].items():
        lines.append(f"| | {fault} | skipped: {reason} | | |")
    return "\n".join(lines)
