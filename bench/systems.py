"""The systems the comparison bench starts on loopback, each as three local members.

Every system offers the same two HTTP workloads to :mod:`bench.wrk`: a single 100-byte record
per request, and 100 such records per request (one atomic batch: kraft-spark's ``records``
list, an etcd txn of 100 puts, one PySyncObj command). Load always goes to the member that
leads when the point starts, so no system pays for a forwarding hop.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from bench.credentials import Tokens, bearer
from bench.native import local_security, start_local, stop_local
from bench.wrk import HttpWorkload, json_headers
from kraft_spark.net.cpu_placement import RolePlacement, split_cpus

VALUE = "v" * 100
BATCH = 100
SINGLE_BODIES = 1000
BATCH_BODIES = 16
START_TIMEOUT_S = 60.0


def _key(i: int) -> str:
    return f"k{i:06d}"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def http_json(url: str, method: str = "GET", body: Any = None,
              timeout: float = 5.0, token: str | None = None) -> tuple[int, Any]:
    """One request on a fresh connection, with ``Authorization: Bearer <token>`` when given;
    (status, parsed JSON body or None). A 401 or 403 raises at once (``wait_for`` does not
    retry it): a refused credential does not heal by waiting."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, parts.path or "/", body=data,
                     headers={"Content-Type": "application/json", **bearer(token)})
        resp = conn.getresponse()
        raw = resp.read()
        if resp.status in (401, 403):
            raise RuntimeError(f"{method} {url} answered {resp.status}: {raw[:300]!r}")
        try:
            return resp.status, json.loads(raw) if raw else None
        except ValueError:
            return resp.status, None
    finally:
        conn.close()


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = START_TIMEOUT_S) -> Any:
    """Poll ``check`` until it returns something other than None or False (a leader index of 0
    counts as ready); raise naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result is not None and result is not False:
                return result
        except (OSError, ValueError, KeyError, http.client.HTTPException) as exc:
            last = exc
        time.sleep(0.1)
    raise RuntimeError(f"{what} not ready after {timeout_s:.0f} s (last error: {last})")


def stop_process(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM,
                 wait_s: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


# --------------------------------------------------------------------------- kraft-spark


def record_bodies() -> tuple[list[bytes], list[bytes]]:
    """``{"key", "value"}`` bodies and ``{"records": [...]}`` batch bodies: the shape both
    kraft-spark's sidecar and the PySyncObj front take."""
    single = [json.dumps({"key": _key(i), "value": VALUE}).encode()
              for i in range(SINGLE_BODIES)]
    batch = [json.dumps({"records": [{"key": _key(b * BATCH + j), "value": VALUE}
                                     for j in range(BATCH)]}).encode()
             for b in range(BATCH_BODIES)]
    return single, batch


def kraft_workloads(url: str, token: str) -> tuple[HttpWorkload, HttpWorkload]:
    """Appends to kraft-spark's HTTP API at ``url``, each with ``token`` (a write token)."""
    single, batch = record_bodies()
    headers = json_headers(token)
    return (HttpWorkload(url, "/v1/records", single, headers=headers),
            HttpWorkload(url, "/v1/records", batch, records_per_request=BATCH, headers=headers))


class KraftLocal:
    """``kraft-spark local``: 3 voter processes, default timeouts, with the HTTP sidecar in the
    ``local`` process and the HTTP API embedded in every node (``--node-http-base-port``), all
    behind the credentials it names in the sidecar's line (``bench.credentials``)."""

    name = "kraft-spark"

    def __init__(self, data_dir: str, base_port: int, http_port: int) -> None:
        self.proc, self.nodes = start_local(
            data_dir, base_port,
            ["--http-port", str(http_port), "--node-http-base-port", str(http_port + 1)],
        )
        self.security = local_security(data_dir)  # written before the nodes started
        assert self.proc.stdout is not None
        try:
            # After the three node lines, `local --http-port` prints the sidecar's line.
            sidecar = json.loads(self.proc.stdout.readline())
            self.url = sidecar["http"]
            self.tokens = Tokens.printed(sidecar, "kraft-spark local")
            self.leader_id: int = wait_for("kraft-spark leader", self._leader_id)
        except BaseException:
            self.stop()  # nothing left running behind a failed start
            raise

    def _leader_id(self) -> int | None:
        leader: int = http_json(self.url + "/v1/quorum",
                                token=self.tokens.read)[1].get("leaderId", -1)
        return leader if leader >= 0 else None

    @property
    def bootstrap(self) -> list[str]:
        return [n["endpoint"] for n in self.nodes]

    def workloads(self) -> tuple[HttpWorkload, HttpWorkload]:
        """Through the sidecar (a separate process hop to the leader)."""
        return kraft_workloads(self.url, self.tokens.write)

    def leader_workloads(self) -> tuple[HttpWorkload, HttpWorkload]:
        """Straight to the HTTP API embedded in the leader (as etcd's gateway, load goes to the
        leader)."""
        url = next(n["http"] for n in self.nodes if n["node_id"] == self.leader_id)
        return kraft_workloads(url, self.tokens.write)

    def stop(self) -> None:
        stop_local(self.proc, self.nodes)


# --------------------------------------------------------------------------- etcd


def _usable_cpus() -> set[int]:
    """The CPUs this process may run on (none known where the platform cannot tell)."""
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()


def _threads_of(pid: int) -> list[int]:
    """Every thread of process ``pid`` (affinity is per thread on Linux)."""
    return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]


class EtcdCluster:
    """Three etcd 3.4 members (Debian's etcd-server; ``members`` others), default
    heartbeat/election timeouts."""

    name = "etcd"

    def __init__(self, data_dir: str, base_port: int, members: int = 3) -> None:
        self.client_urls = [f"http://127.0.0.1:{base_port + 2 * i}" for i in range(members)]
        peer_urls = [f"http://127.0.0.1:{base_port + 2 * i + 1}" for i in range(members)]
        cluster = ",".join(f"m{i}={u}" for i, u in enumerate(peer_urls))
        self.procs: list[subprocess.Popen[Any]] = []
        for i in range(members):
            log = open(os.path.join(data_dir, f"etcd-m{i}.log"), "w")  # noqa: SIM115
            try:
                self.procs.append(subprocess.Popen(
                    ["etcd", "--name", f"m{i}", "--data-dir", os.path.join(data_dir, f"m{i}"),
                     "--listen-client-urls", self.client_urls[i],
                     "--advertise-client-urls", self.client_urls[i],
                     "--listen-peer-urls", peer_urls[i],
                     "--initial-advertise-peer-urls", peer_urls[i],
                     "--initial-cluster", cluster, "--initial-cluster-state", "new",
                     "--initial-cluster-token", "kraft-spark-bench", "--logger", "zap",
                     "--log-level", "error"],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            finally:
                log.close()
        wait_for("etcd leader", lambda: self.leader_index() is not None)

    def status(self, i: int) -> dict[str, Any]:
        _, body = http_json(self.client_urls[i] + "/v3/maintenance/status", "POST", {},
                            timeout=2)
        result: dict[str, Any] = body
        return result

    def leader_index(self) -> int | None:
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                continue
            try:
                st = self.status(i)
            except OSError:
                continue
            if st.get("leader") and st["leader"] == st["header"]["member_id"]:
                return i
        return None

    def leader_url(self) -> str:
        index = wait_for("etcd leader", self.leader_index)
        return self.client_urls[int(index)]

    def workloads(self) -> tuple[HttpWorkload, HttpWorkload]:
        url = self.leader_url()
        single = [json.dumps({"key": _b64(_key(i)), "value": _b64(VALUE)}).encode()
                  for i in range(SINGLE_BODIES)]
        batch = [json.dumps({"success": [
            {"requestPut": {"key": _b64(_key(b * BATCH + j)), "value": _b64(VALUE)}}
            for j in range(BATCH)]}).encode() for b in range(BATCH_BODIES)]
        return (HttpWorkload(url, "/v3/kv/put", single),
                HttpWorkload(url, "/v3/kv/txn", batch, records_per_request=BATCH))

    def place_like_kraft(self) -> bool:
        """Pin the members as ``kraft.cpu.affinity=role`` places kraft-spark's voters: the
        leader on the lower half of the CPUs, the others on the upper half. False (nothing
        done) with fewer than two CPUs or no leader."""
        cpus = _usable_cpus()
        leader = self.leader_index()
        if split_cpus(cpus) is None or leader is None:
            return False
        for i, proc in enumerate(self.procs):
            # kraft-spark's own placement, applied to every thread of a member (Go runs many).
            RolePlacement(cpus, threads=partial(_threads_of, proc.pid)).on_role(i == leader)
        return True

    @staticmethod
    def can_place_like_kraft() -> bool:
        """Whether ``place_like_kraft`` has CPUs to split (two or more)."""
        return split_cpus(_usable_cpus()) is not None

    def unpin(self) -> None:
        """Every member's threads free again on every CPU this process may use."""
        cpus = _usable_cpus()
        for proc in self.procs:
            with contextlib.suppress(OSError):  # a member or thread that exited meanwhile
                for tid in _threads_of(proc.pid):
                    with contextlib.suppress(OSError):
                        os.sched_setaffinity(tid, cpus)

    @contextlib.contextmanager
    def placed_like_kraft(self) -> Iterator[None]:
        """The members pinned (``place_like_kraft``) for the length of the block, then free
        again (``unpin``), so that points in between measure them as packaged."""
        if not self.place_like_kraft():
            raise RuntimeError("cannot place etcd's members like kraft-spark's voters: fewer "
                               "than two CPUs, or no leader")
        try:
            yield
        finally:
            self.unpin()

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc)


# --------------------------------------------------------------------------- PySyncObj


class SyncObjCluster:
    """Three PySyncObj nodes (``bench.pysyncobj_node``): journal file, no fsync."""

    name = "PySyncObj"

    def __init__(self, data_dir: str, base_port: int) -> None:
        raft = [f"127.0.0.1:{base_port + 2 * i}" for i in range(3)]
        self.http_urls = [f"http://127.0.0.1:{base_port + 2 * i + 1}" for i in range(3)]
        self.procs: list[subprocess.Popen[Any]] = []
        for i in range(3):
            partners = [a for j, a in enumerate(raft) if j != i]
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "bench.pysyncobj_node", raft[i],
                 str(base_port + 2 * i + 1), os.path.join(data_dir, f"n{i}"), *partners],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        self.raft = raft
        wait_for("PySyncObj leader", lambda: self.leader_index() is not None)

    def leader_index(self) -> int | None:
        for i, url in enumerate(self.http_urls):
            try:
                _, st = http_json(url + "/status", timeout=2)
            except OSError:
                continue
            if st and st["leader"] == st["self"]:
                return i
        return None

    def workloads(self) -> tuple[HttpWorkload, HttpWorkload]:
        url = self.http_urls[int(wait_for("PySyncObj leader", self.leader_index))]
        single, batch = record_bodies()
        return (HttpWorkload(url, "/put", single),
                HttpWorkload(url, "/batch", batch, records_per_request=BATCH))

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc)


# --------------------------------------------------------------------------- Spark app


class KraftApp:
    """The full Spark application (``kraft-spark run``, local mode, 3 voters, its
    materialization running): the driver's HTTP endpoint, and the HTTP API every voter serves
    itself (``--voter-http-base-port``; ``GET /v1/quorum`` names the leader's), all behind the
    credentials its summary line names (``bench.credentials``)."""

    name = "kraft-spark app"

    def __init__(self, data_dir: str, http_port: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kraft_spark", "run", "--data-dir", data_dir,
             "--http-port", str(http_port), "--voter-http-base-port", str(http_port + 1)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        assert self.proc.stdout is not None
        try:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("kraft-spark run exited before it printed its endpoints")
            summary = json.loads(line)
            self.url = summary["http"]
            self.tokens = Tokens.printed(summary, "kraft-spark run")
            self._warm_offset = -1
            wait_for("Spark application's first commit", self._first_commit, timeout_s=180)
            # Measure the steady state: the first snapshot MERGE after start is cold (6-9 s of
            # class loading and code generation on the 2 cores the load shares), a one-off.
            wait_for("Spark application's first snapshot cycle", self._snapshot_caught_up,
                     timeout_s=180)
        except BaseException:
            self.stop()  # no application left running behind a failed start
            raise

    def _first_commit(self) -> bool:
        status, body = http_json(self.url + "/v1/records", "POST", {"key": "warm", "value": 0},
                                 timeout=30, token=self.tokens.write)
        if status == 200:
            self._warm_offset = int(body["last_offset"])
        return status == 200

    def _table_offsets(self) -> dict[str, float]:
        """Each Delta table's materialized offset (``kraft_spark_delta_table_offset``)."""
        request = urllib.request.Request(self.url + "/metrics",
                                         headers=bearer(self.tokens.read))
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):  # not retried (wait_for retries an OSError)
                raise RuntimeError(f"GET {self.url}/metrics answered {exc.code}") from None
            raise
        return {m.group(1): float(m.group(2)) for m in re.finditer(
            r'kraft_spark_delta_table_offset\{table="(\w+)"\} (\S+)', text)}

    def _snapshot_caught_up(self) -> bool:
        return self._table_offsets().get("snapshot", -1.0) > self._warm_offset

    def materialized(self) -> bool:
        """Whether the driver has materialized everything committed into ``records`` and
        ``snapshot`` (their offsets have reached the high watermark)."""
        hw = http_json(self.url + "/v1/quorum", token=self.tokens.read)[1]["highWatermark"]
        offsets = self._table_offsets()
        return all(offsets.get(table, -1.0) >= hw for table in ("records", "snapshot"))

    def settle(self, timeout_s: float = 120.0) -> float:
        """Wait until the driver has materialized what the last point appended (a point of
        100-record batches leaves it about a million records behind), so that its catching up
        does not fall on the next point, whichever system that measures. Returns the seconds
        waited; after ``timeout_s`` it goes on regardless (the caller logs the wait)."""
        started = time.monotonic()
        with contextlib.suppress(RuntimeError):
            wait_for("the application's materializer", self.materialized, timeout_s=timeout_s)
        return time.monotonic() - started

    def workloads(self) -> tuple[HttpWorkload, HttpWorkload]:
        """Through the driver's endpoint (it forwards to the leader)."""
        return kraft_workloads(self.url, self.tokens.write)

    def leader_url(self) -> str:
        """The leader's own HTTP API, as the driver's ``GET /v1/quorum`` names it now."""
        url: str = wait_for("the application's leader",
                            lambda: http_json(self.url + "/v1/quorum",
                                              token=self.tokens.read)[1].get("leaderHttpUrl"))
        return url

    def leader_workloads(self) -> tuple[HttpWorkload, HttpWorkload]:
        """Straight to the leader's own HTTP API (where the leader is when the point starts)."""
        return kraft_workloads(self.leader_url(), self.tokens.write)

    def stop(self) -> None:
        # SIGTERM to the Python process only: pyspark's JVM must see a clean shutdown.
        stop_process(self.proc, wait_s=180)
