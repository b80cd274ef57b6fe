"""The robustness test's moving parts: ``kraft-spark local`` with every node serving the HTTP
API, clients that run a key-value workload against the nodes and record a history, and a
nemesis that kills (kill -9, then a restart) or freezes (SIGSTOP / SIGCONT) one node at a time.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kraft_spark.lincheck.checker import History
from tests.integration.harness import LocalQuorum

REQUEST_TIMEOUT_S = 2.5
# After a failed request a client waits this long: an election answers every write 503 (an
# unknown outcome, each one more branch for the checker) until it is over.
BACKOFF_S = 0.3


@dataclass
class KvQuorum(LocalQuorum):
    """``kraft-spark local`` as it starts by default: node i serves the HTTP API itself at
    ``http_urls[i]`` and etcd's at ``nodes[i]["etcd"]`` (``LocalQuorum.node_http``)."""

    node_http: bool = True

    def alive(self, node_id: int) -> bool:
        pid = self.pid(node_id)
        for proc in self.restarted:  # ours: a killed one stays a zombie until polled
            if proc.pid == pid:
                return proc.poll() is None
        try:  # one `local` started: it reaps its children
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def log_tails(data_dir: Path, lines: int = 40) -> str:
    out = []
    for log in sorted((data_dir / "logs").glob("node-*.log")):
        text = log.read_text(errors="replace").splitlines()
        out.append(f"---- {log.name} (last {min(lines, len(text))} of {len(text)} lines)")
        out.extend(text[-lines:])
    return "\n".join(out)


class NotSent(Exception):
    """The request never left: the connection was refused (it had no effect)."""


class Lost(Exception):
    """The request was sent (or may have been) and no answer came back."""


class NodeConnection:
    """One keep-alive HTTP connection to a node, opened again after any error."""

    def __init__(self, url: str, timeout_s: float = REQUEST_TIMEOUT_S,
                 token: str | None = None) -> None:
        parts = urlsplit(url)
        self.url = url
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def call(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        if self._conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            try:
                conn.connect()
            except OSError as exc:  # refused, or a frozen node's full backlog: nothing sent
                conn.close()
                raise NotSent(f"{self.url}: {exc}") from exc
            self._conn = conn
        data = None if body is None else json.dumps(body).encode()
        sent = {"Content-Type": "application/json"} if data is not None else {}
        sent.update(self.auth)
        sent.update(headers or {})
        try:
            self._conn.request(method, path, body=data, headers=sent)
            response = self._conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise Lost(f"{self.url}: {type(exc).__name__}: {exc}") from exc
        if response.will_close:
            self.close()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, raw.decode(errors="replace")


def leader_of(quorum: KvQuorum) -> int | None:
    """The leader some node names (``/readyz``), None when none answers with one."""
    for url in quorum.http_urls:
        conn = NodeConnection(url, timeout_s=1.0)
        try:
            status, body = conn.call("GET", "/readyz")
        except (NotSent, Lost):
            continue
        finally:
            conn.close()
        if status == 200 and isinstance(body, dict) and body.get("leaderId", -1) >= 0:
            return int(body["leaderId"])
    return None


def wait_ready(quorum: KvQuorum, timeout_s: float = 30.0) -> None:
    """Until every node answers ``/readyz`` with a leader."""
    deadline = time.monotonic() + timeout_s
    for url in quorum.http_urls:
        conn = NodeConnection(url, timeout_s=1.0)
        while True:
            try:
                status, body = conn.call("GET", "/readyz")
                if status == 200:
                    break
            except (NotSent, Lost) as exc:
                body = str(exc)
            assert time.monotonic() < deadline, f"{url} is not ready: {body}"
            time.sleep(0.1)
        conn.close()


def read_log(quorum: KvQuorum, min_end: int, timeout_s: float = 20.0,
             ) -> set[tuple[str, str]] | None:
    """(key, value) of every record committed from offset 0 up to at least ``min_end``, values
    being JSON strings (``GET /v1/records``, through any node that answers); None when the log
    no longer starts at 0 (a snapshot truncated it) or no node answers in time."""
    deadline = time.monotonic() + timeout_s
    logged: set[tuple[str, str]] = set()
    offset = 0
    node = 0
    while time.monotonic() < deadline:
        conn = NodeConnection(quorum.http_urls[node], token=quorum.token)
        try:
            status, body = conn.call("GET", f"/v1/records?from_offset={offset}&limit=1000")
        except (NotSent, Lost):
            status, body = 0, None
        finally:
            conn.close()
        if status == 410:
            return None
        if status != 200 or not isinstance(body, dict):
            node = (node + 1) % len(quorum.http_urls)
            time.sleep(0.2)
            continue
        for record in body["records"]:
            if isinstance(record.get("key"), str) and isinstance(record.get("value"), str):
                logged.add((record["key"], record["value"]))
        offset = int(body["next_offset"])
        if not body["records"]:
            if offset >= min_end:
                return logged
            time.sleep(0.1)  # this node does not know of the commits up to min_end yet
    return None


# ---- the workload


@dataclass
class Unexpected:
    """Answers the workload does not know how to read: the test fails on any."""

    items: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str) -> None:
        with self.lock:
            if len(self.items) < 50:
                self.items.append(what)


@dataclass
class Workload:
    """What the clients share."""

    quorum: KvQuorum
    keys: list[str]
    clients: int
    history: History = field(default_factory=History)
    stop: threading.Event = field(default_factory=threading.Event)
    unexpected: Unexpected = field(default_factory=Unexpected)


class KvClient(threading.Thread):
    """One client: a loop of get / put / cas / delete on the workload's keys until its
    ``stop`` is set, through one node at a time (the next one after an error). Writes carry
    values unique to the history; a cas expects the version this client last read of the
    key."""

    def __init__(self, index: int, workload: Workload, seed: int) -> None:
        super().__init__(name=f"kv-client-{index}", daemon=True)
        self.index, self.clients = index, workload.clients
        self.quorum, self.keys, self.history = workload.quorum, workload.keys, workload.history
        self.stop, self.unexpected = workload.stop, workload.unexpected
        self.rng = random.Random(seed)
        self.generation = 0  # a new porcupine client id after each unknown outcome
        self.node = index % len(self.quorum.http_urls)
        self.conn = NodeConnection(self.quorum.http_urls[self.node], token=self.quorum.token)
        self.seen: dict[str, int] = {}  # key -> the version this client last read
        self.writes = 0

    @property
    def client_id(self) -> int:
        return self.index + self.clients * self.generation

    def _next_node(self) -> None:
        self.conn.close()
        self.node = (self.node + 1) % len(self.quorum.http_urls)
        self.conn = NodeConnection(self.quorum.http_urls[self.node], token=self.quorum.token)

    def _backoff(self) -> None:
        self._next_node()
        self.stop.wait(BACKOFF_S)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                key = self.rng.choice(self.keys)
                roll = self.rng.random()
                if roll < 0.35:
                    self.get(key)
                elif roll < 0.55:
                    self.write("put", key)
                elif roll < 0.9:
                    if key not in self.seen or self.rng.random() < 0.3:
                        self.get(key)
                    self.write("cas", key)
                else:
                    self.write("delete", key)
        except Exception as exc:  # an answer of a shape this client does not expect
            self.unexpected.add(f"{self.name} stopped: {type(exc).__name__}: {exc}")
        finally:
            self.conn.close()

    def get(self, key: str) -> None:
        handle = self.history.invoke(self.client_id, "get", key)
        try:
            status, body = self.conn.call("GET", f"/v1/kv/{key}")
        except (NotSent, Lost):
            self.history.fail(handle)  # a read that failed had no effect
            self._backoff()
            return
        if status == 200 and isinstance(body, dict) and body.get("key") == key:
            value = body.get("value")
            version = int(body["version"])
            # Only JSON strings are written: anything else is reported as such.
            self.history.ok(handle, present=True, version=version,
                            value=value if isinstance(value, str) else json.dumps(value))
            self.seen[key] = version
        elif status == 404 and isinstance(body, dict) and "offset" in body:
            self.history.ok(handle, present=False)
            self.seen[key] = 0
        else:
            self.history.fail(handle)
            if status not in (502, 503, 504):
                self.unexpected.add(f"GET /v1/kv/{key} via {self.conn.url}: {status} {body}")
            self._backoff()

    def write(self, kind: str, key: str) -> None:
        self.writes += 1
        value = None if kind == "delete" else f"c{self.index}-{self.writes}"
        expect = None
        body: dict[str, Any] = {"records": [{"key": key, "value": value}]}
        if kind == "cas":
            expect = self.seen.get(key, self.rng.randrange(3))
            body["conditions"] = [{"key": key, "exists": False} if expect == 0
                                  else {"key": key, "version": expect}]
        handle = self.history.invoke(self.client_id, kind, key, value=value,
                                     expect_version=expect)
        try:
            status, answer = self.conn.call("POST", "/v1/records", body)
        except NotSent:
            self.history.fail(handle)
            self._backoff()
            return
        except Lost:
            self._unknown(handle)
            return
        if status == 200:
            self.history.ok(handle)
            if kind == "delete":
                self.seen[key] = 0
            elif expect is not None:
                self.seen[key] = expect + 1
            else:  # this client's guess; the next get corrects it
                self.seen[key] = self.seen.get(key, 0) + 1
        elif (status == 409 and kind == "cas" and isinstance(answer, dict)
                and isinstance(answer.get("failed"), list)):
            self.history.ok(handle, ok=False)
            for failed in answer["failed"]:
                if isinstance(failed, dict) and failed.get("key") == key and "version" in failed:
                    self.seen[key] = int(failed["version"])
        elif 400 <= status < 500:
            self.history.fail(handle)  # refused as malformed: never appended
            self.unexpected.add(f"POST /v1/records {body} via {self.conn.url}: {status} {answer}")
            self._backoff()
        else:  # 502 / 503 / 504 (or a 500): it may have been appended
            if status not in (502, 503, 504):
                self.unexpected.add(
                    f"POST /v1/records {body} via {self.conn.url}: {status} {answer}")
            self._unknown(handle)

    def _unknown(self, handle: int) -> None:
        self.history.unknown(handle)
        self.generation += 1
        self._backoff()


# ---- the nemesis


class Nemesis(threading.Thread):
    """One fault at a time until ``stop``: kill -9 a node and start it again, or SIGSTOP it for
    ``pause_s`` and SIGCONT it; the leader is the target about half the time. Between faults it
    waits until every node is back (``/readyz`` everywhere), then ``calm_s``."""

    def __init__(self, quorum: KvQuorum, seed: int, *, calm_s: float = 1.5,
                 pause_s: tuple[float, float] = (1.5, 3.0)) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.quorum = quorum
        self.rng = random.Random(seed)
        self.calm_s, self.pause_s = calm_s, pause_s
        self.stop = threading.Event()
        self.started_at = time.monotonic()
        self.events: list[str] = []
        self.kills = self.pauses = self.leader_faults = 0
        self.error: BaseException | None = None
        self._frozen: int | None = None
        self._lock = threading.Lock()

    def say(self, what: str) -> None:
        self.events.append(f"{time.monotonic() - self.started_at:7.2f}s {what}")

    def run(self) -> None:
        try:
            self.stop.wait(self.calm_s)
            while not self.stop.is_set():
                picked = self.pick(leader_of(self.quorum))
                if picked is None:
                    self.stop.wait(0.2)
                    continue
                target, role = picked
                if role == "the leader":
                    self.leader_faults += 1
                self.strike(target, role)
                wait_ready(self.quorum, timeout_s=30.0)
                self.say("every node ready")
                self.stop.wait(self.calm_s)
        except BaseException as exc:
            self.error = exc
            self.say(f"failed: {exc!r}")
        finally:
            self.heal()

    def pick(self, leader: int | None) -> tuple[int, str] | None:
        """The next fault's target and its role (None: none now, ask again shortly): the
        leader about half the time, else any node."""
        if leader is not None and self.rng.random() < 0.5:
            return leader, "the leader"
        target = self.rng.randrange(len(self.quorum.http_urls))
        return target, "the leader" if target == leader else "a follower"

    def strike(self, target: int, role: str) -> None:
        """A kill -9 and restart, then a freeze, in turn."""
        if (self.kills + self.pauses) % 2 == 0:
            self.kill_and_restart(target, role)
        else:
            self.freeze(target, role)

    def kill_and_restart(self, node: int, role: str) -> None:
        self.say(f"kill -9 node {node} ({role}, pid {self.quorum.pid(node)})")
        os.kill(self.quorum.pid(node), signal.SIGKILL)
        self.kills += 1
        time.sleep(self.rng.uniform(0.5, 1.5))  # not cut short by stop: it restarts the node
        proc = self.quorum.restart_node(node)
        self.say(f"restarted node {node} (pid {proc.pid})")
        url = urlsplit(self.quorum.http_urls[node])
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"node {node} exited {proc.returncode} after a restart"
            try:
                with socket.create_connection((url.hostname, url.port), timeout=0.5):
                    break
            except OSError:
                assert time.monotonic() < deadline, f"node {node} did not listen again"
                time.sleep(0.05)

    def freeze(self, node: int, role: str) -> None:
        pid = self.quorum.pid(node)
        seconds = self.rng.uniform(*self.pause_s)
        self.say(f"SIGSTOP node {node} ({role}, pid {pid}) for {seconds:.1f} s")
        with self._lock:
            self._frozen = pid
        os.kill(pid, signal.SIGSTOP)
        self.pauses += 1
        time.sleep(seconds)
        self._thaw()
        self.say(f"SIGCONT node {node}")

    def _thaw(self) -> None:
        with self._lock:
            pid, self._frozen = self._frozen, None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def heal(self) -> None:
        """No node stays frozen or dead (safe to call more than once, from any thread)."""
        self._thaw()
        for node in range(len(self.quorum.http_urls)):
            if not self.quorum.alive(node):
                self.say(f"restarting node {node} while healing")
                self.quorum.restart_node(node)

    def finish(self, timeout_s: float = 60.0) -> None:
        """Stop after the fault under way (and its recovery)."""
        self.stop.set()
        self.join(timeout_s)
        self.heal()
