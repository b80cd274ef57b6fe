"""``kraft-spark local``'s watch over its node processes.

A node that stopped on a log-directory failure (exit code 74, see
``kraft_spark.net.storage_failure``) is started again after a backoff that doubles from 1 s up
to 30 s, and is reset once a restarted node has stayed up for a minute: a disk that stays full
costs a failed start every 30 s, not a spin. Any other exit (kill -9, a refusal at start-up,
a clean stop) is reported once and left alone: it is the operator's (or a test's) to restart.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from kraft_spark.net.storage_failure import STORAGE_FAILURE_EXIT

FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
STABLE_AFTER_S = 60.0

Launch = Callable[[int], "subprocess.Popen[bytes]"]


@dataclass
class _Watched:
    proc: subprocess.Popen[bytes]
    started_at: float
    failures: int = 0  # storage failures in a row
    restart_at: float | None = None  # a restart is due then
    reported: bool = False


class NodeSupervisor:
    """``launch(node_id)`` starts a node process; ``poll()`` is called every fraction of a
    second from ``local``'s main loop."""

    def __init__(self, launch: Launch, say: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic,
                 on_storage_failure: Callable[[int], None] | None = None) -> None:
        """``on_storage_failure(node_id)``: counted where an operator scrapes it (``local``'s
        sidecar serves ``kraft_spark_log_dir_failures_total``)."""
        self._launch = launch
        self._say = say
        self._on_storage_failure = on_storage_failure
        self._clock = clock
        self._nodes: dict[int, _Watched] = {}
        self.restarts = 0

    def start(self, node_id: int) -> subprocess.Popen[bytes]:
        proc = self._launch(node_id)
        self._nodes[node_id] = _Watched(proc, self._clock())
        return proc

    def procs(self) -> list[subprocess.Popen[bytes]]:
        return [w.proc for w in self._nodes.values()]

    def running(self) -> int:
        """Nodes running or due to be restarted."""
        return sum(1 for w in self._nodes.values()
                   if w.proc.poll() is None or w.restart_at is not None)

    def poll(self) -> None:
        now = self._clock()
        for node_id, watched in self._nodes.items():
            code = watched.proc.poll()
            if code is None:
                if watched.failures and now - watched.started_at >= STABLE_AFTER_S:
                    watched.failures = 0
                continue
            if watched.restart_at is not None:
                if now >= watched.restart_at:
                    self._restart(node_id, watched, now)
                continue
            if code == STORAGE_FAILURE_EXIT:
                watched.failures += 1
                if self._on_storage_failure is not None:
                    self._on_storage_failure(node_id)
                delay = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (watched.failures - 1))
                watched.restart_at = now + delay
                self._say(f"node {node_id} (pid {watched.proc.pid}) stopped on a log directory "
                          f"failure (exit {code}, failure {watched.failures} in a row; see its "
                          f"log): restarting it in {delay:.0f} s")
            elif not watched.reported:
                watched.reported = True
                self._say(f"node {node_id} (pid {watched.proc.pid}) exited with code {code} "
                          "(not restarted)")

    def _restart(self, node_id: int, watched: _Watched, now: float) -> None:
        watched.restart_at = None
        try:
            watched.proc = self._launch(node_id)
        except OSError as exc:
            self._say(f"node {node_id}: could not start it again: {exc}; retrying later")
            watched.restart_at = now + MAX_BACKOFF_S
            return
        watched.started_at = now
        watched.reported = False
        self.restarts += 1
        self._say(f"node {node_id} started again (pid {watched.proc.pid})")
