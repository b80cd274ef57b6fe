"""The watch robustness test's clients: writers that put, write conditionally, delete, and grant
leases with several keys that they revoke or leave to expire, over HTTP through any node with
retries as a user's client makes them; and watchers that follow a prefix or a key through one
node as Server-Sent Events, resuming after every disconnect with ``Last-Event-ID`` on the same
node or, when it is down, on another.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import threading
import time
from collections import Counter
from typing import Any
from urllib.parse import quote, urlsplit

from .nemesis import BACKOFF_S, KvQuorum, Lost, NodeConnection, NotSent, Unexpected
from .watch_history import Point, Received, WatchLog, cursor_after

# A stream that delivers nothing for this long is taken as stuck (its node frozen: the
# nemesis freezes one for 1.5 to 3 s) and resumed on the next node. A quiet stream (progress
# events come every 5 s) is resumed too: that costs nothing, and a user's client does it.
IDLE_S = 2.5
# A write is retried (same Idempotency-Key) through the next node for this long.
RETRY_S = 12.0
# Keys: plain ones under the watched prefix, lease keys under a narrower one, and some outside.
PLAIN_KEYS = ["w/k0", "w/k1", "w/k2", "w/k3"]
LEASE_KEYS = ["w/l/a", "w/l/b", "w/l/c", "w/l/d", "w/l/e", "w/l/f"]
OTHER_KEYS = ["x/k0", "x/k1"]


class StreamEnded(Exception):
    """The stream ended or broke (why)."""


class SseWatcher(threading.Thread):
    """A watch of ``prefix`` or ``key`` through node ``home`` (from ``from_offset``, or from
    now on), until ``stop`` or until it reached past ``target`` (set once the last writes are
    in). Every disconnect is resumed with ``Last-Event-ID`` (the last id received, an event's
    or a progress event's; a ``cancelled`` event's ``resume_id``), first on the node it was
    on, then the next ones. Now and then it drops the stream on purpose, most often right
    after an event that is not the last of its offset (an id ``N.M``), and resumes on a node
    picked at random."""

    def __init__(self, name: str, quorum: KvQuorum, home: int, *, seed: int,
                 stop: threading.Event, prefix: str | None = None, key: str | None = None,
                 from_offset: int | None = None) -> None:
        super().__init__(name=name, daemon=True)
        self.quorum, self.home, self.stop = quorum, home, stop
        self.rng = random.Random(seed)
        self.from_offset = from_offset
        self.log = WatchLog(name, key, prefix)
        if from_offset is not None:
            self.log.start = (from_offset, 0)
        self.last_id: str | None = None
        self.cursor: Point | None = self.log.start
        self.target: int | None = None  # done once the cursor is past this offset
        self.conn_no = 0
        self.resumes = self.fallbacks = self.dropped = self.dropped_mid = 0
        self.reasons: Counter[str] = Counter()  # why streams ended
        self.error: BaseException | None = None

    # ---- state

    def done(self) -> bool:
        target = self.target
        return target is not None and self.cursor is not None and self.cursor[0] > target

    def _query(self) -> str:
        what = (f"key={quote(self.log.key, safe='')}" if self.log.key is not None
                else f"prefix={quote(self.log.prefix or '', safe='')}")
        if self.last_id is None and self.cursor is not None:  # resume at offset 0
            what += f"&from_offset={self.cursor[0]}"
        return what

    # ---- the loop

    def run(self) -> None:
        node, why = self.home, "start"
        try:
            while not self.stop.is_set() and not self.done():
                try:
                    self._stream(node, why)
                    break  # stopped, or done
                except StreamEnded as exc:
                    why = str(exc)
                except OSError as exc:
                    why = f"{type(exc).__name__}: {exc}"
                self.reasons[why.split(" after ")[0].split(":")[0]] += 1
                if why.startswith("dropped"):
                    node = self.rng.randrange(len(self.quorum.http_urls))
                elif not why.startswith("cancelled"):
                    node = (node + 1) % len(self.quorum.http_urls)  # fall back to the next
                    self.fallbacks += 1
                    self.stop.wait(0.1)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _stream(self, node: int, why: str) -> None:
        url = urlsplit(self.quorum.http_urls[node])
        self.conn_no += 1
        resume = self.last_id
        self.log.connections.append(
            f"#{self.conn_no} node {node} after {len(self.log.items)} items ({why}); "
            f"Last-Event-ID {resume!r}, query {self._query()}")
        if resume is not None or self.conn_no > 1:
            self.resumes += 1
        headers = [f"GET /v1/watch?{self._query()} HTTP/1.1", f"Host: {url.netloc}",
                   f"Authorization: Bearer {self.quorum.token}", "Accept: text/event-stream"]
        if resume is not None:
            headers.append(f"Last-Event-ID: {resume}")
        sock = socket.create_connection((url.hostname, url.port), timeout=1.0)
        try:
            sock.settimeout(0.5)
            sock.sendall(("\r\n".join(headers) + "\r\n\r\n").encode())
            reader = _ChunkedReader(sock, self.stop)
            status, head = reader.head()
            if status != 200:
                body = reader.rest(head)
                if status not in (502, 503, 504):
                    self.log.connections[-1] += f": answered {status}: {body[:300]!r}"
                    if status in (400, 410, 422):  # no resume can succeed: the test fails
                        raise AssertionError(f"{self.name}: node {node} answered {status} to "
                                             f"Last-Event-ID {resume!r}: {body[:300]!r}")
                raise StreamEnded(f"answered {status}")
            self._events(reader, node)
        finally:
            sock.close()

    def _events(self, reader: _ChunkedReader, node: int) -> None:
        text = ""
        while True:
            if self.stop.is_set() or self.done():
                return
            text += reader.data().decode()
            while "\n\n" in text:
                block, text = text.split("\n\n", 1)
                fields: dict[str, str] = {}
                for line in block.split("\n"):
                    if line and not line.startswith(":"):
                        name, _, value = line.partition(":")
                        fields[name] = value.removeprefix(" ")
                if "event" in fields:
                    self._item(fields, node)

    def _item(self, fields: dict[str, str], node: int) -> None:
        data = json.loads(fields.get("data", "{}"))
        item = Received(fields["event"], fields.get("id"), data, node, self.conn_no)
        if item.kind == "cancelled":
            self.log.items.append(item)
            if data.get("resume_id") is not None:
                self.last_id = str(data["resume_id"])
            elif self.cursor is not None:
                self.cursor = max(self.cursor, (int(data["resume_offset"]), 0))
            raise StreamEnded(f"cancelled: {data.get('reason')}")
        if self.log.start is None:  # a watch from now on starts where its first progress says
            if item.kind != "progress":
                raise AssertionError(f"{self.name}: a watch from now on began with {item}")
            self.log.start = cursor_after(item)
        self.log.items.append(item)
        after = cursor_after(item)
        if after is not None:
            self.cursor = after if self.cursor is None else max(self.cursor, after)
            if item.id is not None:
                self.last_id = item.id
        if item.kind in ("put", "delete"):
            mid = item.id is not None and "." in item.id
            if self.rng.random() < (0.4 if mid else 0.01):
                self.dropped += 1
                self.dropped_mid += mid
                raise StreamEnded(f"dropped on purpose after {item.id}")


class _ChunkedReader:
    """The response to a request on ``sock``: its head, then the body's bytes (chunked
    transfer coding, as uvicorn streams), waiting at most ``IDLE_S`` for any."""

    def __init__(self, sock: socket.socket, stop: threading.Event) -> None:
        self.sock, self.stop = sock, stop
        self.buf = b""
        self.chunked = False

    def _recv(self) -> None:
        idle_since = time.monotonic()
        while not self.stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                if time.monotonic() - idle_since > IDLE_S:
                    raise StreamEnded(f"nothing for {IDLE_S:g} s") from None
                continue
            if not data:
                raise StreamEnded("connection closed")
            self.buf += data
            return
        raise StreamEnded("stopped")

    def head(self) -> tuple[int, dict[str, str]]:
        while b"\r\n\r\n" not in self.buf:
            self._recv()
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        head = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        self.chunked = head.get("transfer-encoding", "").lower() == "chunked"
        return status, head

    def rest(self, head: dict[str, str]) -> bytes:
        """A short answer's body (an error's), as far as it arrives."""
        want = int(head.get("content-length", "0") or 0)
        with contextlib.suppress(StreamEnded):
            while len(self.buf) < want:
                self._recv()
        return self.buf

    def data(self) -> bytes:
        """The next bytes of the body."""
        if not self.chunked:
            if not self.buf:
                self._recv()
            out, self.buf = self.buf, b""
            return out
        while b"\r\n" not in self.buf:
            self._recv()
        size_line, rest = self.buf.split(b"\r\n", 1)
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            raise StreamEnded("the stream ended")
        while len(rest) < size + 2:
            self._recv()
            rest = self.buf.split(b"\r\n", 1)[1]
        self.buf = rest[size + 2:]
        return rest[:size]


# ---- writers


class Writer(threading.Thread):
    """One user's writes until ``stop``, through one node at a time (the next after a
    failure): puts, conditional puts (on a guessed version: many fail), deletes, writes outside
    the watched prefix, and leases: each granted (with a chosen id, so a retried grant that
    answers 409 "already exists" went through), given several keys in one write (keys shared
    with other leases, which take them over, or keys of its own), sometimes one more key, then
    revoked, or left to expire (sometimes after a keep-alive). Every append carries an
    Idempotency-Key; every request is retried until answered."""

    def __init__(self, index: int, quorum: KvQuorum, seed: int, stop: threading.Event,
                 unexpected: Unexpected) -> None:
        super().__init__(name=f"writer-{index}", daemon=True)
        self.index, self.quorum, self.stop, self.unexpected = index, quorum, stop, unexpected
        self.rng = random.Random(seed)
        self.tag = f"{seed}-{index}"
        self.node = index % len(quorum.http_urls)
        self.conn = NodeConnection(quorum.http_urls[self.node], token=quorum.token)
        self.n = 0
        self.counts: dict[str, int] = {}
        self.versions: dict[str, int] = {}

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def _next_node(self) -> None:
        self.conn.close()
        self.node = (self.node + 1) % len(self.quorum.http_urls)
        self.conn = NodeConnection(self.quorum.http_urls[self.node], token=self.quorum.token)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any] | None:
        """Answered (status, body), retried through the next node on no answer or a 5xx;
        None when it gave up (``RETRY_S``, or ``stop``). Appends carry an Idempotency-Key
        (the lease routes take none: a retry answers 409 or 404 instead)."""
        self.n += 1
        headers = ({"Idempotency-Key": f"{self.tag}-{self.n}"} if path == "/v1/records"
                   else {})
        deadline = time.monotonic() + RETRY_S
        while time.monotonic() < deadline and not self.stop.is_set():
            try:
                status, answer = self.conn.call(method, path, body, headers)
            except (NotSent, Lost):
                status, answer = 0, None
            if status and status < 500:
                return status, answer
            self._next_node()
            self.stop.wait(BACKOFF_S)
        self.count("gave up")
        return None

    def _expect(self, answer: tuple[int, Any] | None, what: str, *ok: int) -> int:
        if answer is None:
            return 0
        if answer[0] not in ok:
            self.unexpected.add(f"{self.name} {what}: {answer[0]} {answer[1]}")
        return answer[0]

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                roll = self.rng.random()
                if roll < 0.45:
                    self.lease_cycle()
                elif roll < 0.65:
                    self.put(self.rng.choice(PLAIN_KEYS + OTHER_KEYS))
                elif roll < 0.9:
                    self.cas(self.rng.choice(PLAIN_KEYS))
                else:
                    key = self.rng.choice(PLAIN_KEYS)
                    body = {"records": [{"key": key, "value": None}]}
                    if self._expect(self.request("POST", "/v1/records", body), "delete",
                                    200) == 200:
                        self.count("delete")
        except Exception as exc:
            self.unexpected.add(f"{self.name} stopped: {type(exc).__name__}: {exc}")
        finally:
            self.conn.close()

    def put(self, key: str) -> None:
        body = {"records": [{"key": key, "value": f"{self.tag}-{self.n}"}]}
        if self._expect(self.request("POST", "/v1/records", body), "put", 200) == 200:
            self.count("put")

    def cas(self, key: str) -> None:
        if self.rng.random() < 0.5:
            answer = self.request("GET", f"/v1/kv/{key}")
            if answer is not None and answer[0] in (200, 404) and isinstance(answer[1], dict):
                self.versions[key] = int(answer[1].get("version", 0))
        version = self.versions.get(key, 0) if self.rng.random() < 0.7 else self.rng.randrange(3)
        condition = ({"key": key, "exists": False} if version == 0
                     else {"key": key, "version": version})
        body = {"conditions": [condition],
                "records": [{"key": key, "value": f"{self.tag}-{self.n}"}]}
        status = self._expect(self.request("POST", "/v1/records", body), "cas", 200, 409)
        if status == 200:
            self.count("cas ok")
            self.versions[key] = version + 1
        elif status == 409:
            self.count("cas failed")

    def lease_cycle(self) -> None:
        lease_id = self.rng.randrange(1, 2**52)
        revoke = self.rng.random() < 0.5
        ttl = 5000 if revoke else self.rng.randrange(700, 1500)
        status = self._expect(self.request("POST", "/v1/leases",
                                           {"ttl_ms": ttl, "lease_id": lease_id}),
                              "grant", 200, 409)
        if status not in (200, 409):  # 409: a retry, the first grant went through
            return
        self.count("grant")
        if revoke or self.rng.random() < 0.5:
            keys = self.rng.sample(LEASE_KEYS, self.rng.randrange(2, 5))
        else:  # keys of its own: no later lease takes them over before it expires
            keys = [f"w/l/x{lease_id}/{i}" for i in range(self.rng.randrange(2, 5))]
        writes = [keys[:-1], keys[-1:]] if self.rng.random() < 0.3 else [keys]
        for group in writes:
            body = {"lease_id": lease_id,
                    "records": [{"key": k, "value": f"{self.tag}-{self.n}"} for k in group]}
            # 404: the lease expired already (a short TTL and a slow write)
            if self._expect(self.request("POST", "/v1/records", body), "lease put",
                            200, 404) == 200:
                self.count("lease keys")
        if revoke:
            # 404 on a retry: the first revoke went through
            if self._expect(self.request("DELETE", f"/v1/leases/{lease_id}"), "revoke",
                            200, 404):
                self.count("revoke")
        else:
            # Sometimes kept alive once: an expiry the leader decided before it is void.
            if self.rng.random() < 0.3 and self._expect(
                    self.request("POST", f"/v1/leases/{lease_id}/keepalive"),
                    "keepalive", 200, 404) == 200:
                self.count("keepalive")
            self.count("left to expire")
