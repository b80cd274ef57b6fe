"""The control channel: voter tasks dial in to the driver, report where they run, and wait
for ``stop``."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from typing import Any

log = logging.getLogger("kraft_spark.driver")




class ControlChannel:
    """Voter tasks dial in, report where they run, and wait for ``stop``."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._server = socket.create_server((host, 0))
        self.host = host
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self.voters: dict[int, dict[str, Any]] = {}  # latest hello per voter id
        self._by_voter: dict[int, socket.socket] = {}  # the latest connection per voter id
        self.changed = threading.Condition(self._lock)
        self._closed = False
        threading.Thread(target=self._accept, name="control-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._hello, args=(conn,), daemon=True).start()

    def _hello(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        try:
            line = conn.makefile("r", encoding="utf-8").readline()
            hello = json.loads(line)
        except (OSError, ValueError):
            conn.close()
            return
        conn.settimeout(None)
        with self.changed:
            self._conns.append(conn)
            self._by_voter[int(hello["voter_id"])] = conn
            self.voters[int(hello["voter_id"])] = hello
            self.changed.notify_all()
        log.info("voter %s of generation %s runs on %s:%s (executor %s, pid %s)",
                 hello["voter_id"], hello["generation"], hello["host"], hello["port"],
                 hello["executor_id"], hello["pid"])

    def wait_generation(self, generation: int, count: int, timeout_s: float) -> dict[int, Any]:
        """The hellos of every voter of ``generation`` (or newer); empty on timeout."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                ready = {v: h for v, h in self.voters.items() if h["generation"] >= generation}
                if len(ready) >= count:
                    return ready
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return {}
                self.changed.wait(min(left, 0.5))

    def release(self, voter_id: int, line: str, payload: bytes = b"") -> None:
        """Tell a fresh voter how to start (executors/restore_disk.py): one line, then
        ``payload`` (a restore snapshot's bytes). A voter gone meanwhile is skipped: its
        generation fails and the next one is decided afresh."""
        with self._lock:
            conn = self._by_voter.get(voter_id)
        if conn is None:
            return
        try:
            conn.sendall(line.encode() + b"\n" + payload)
        except OSError as exc:
            log.warning("voter %d: could not send %r: %s", voter_id, line, exc)

    def stop_voters(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.sendall(b"stop\n")

    def close(self) -> None:
        self._closed = True
        self.stop_voters()
        self._server.close()
        with self.changed:
            self.changed.notify_all()
