"""The HTTP address users are given, as its host process runs it: the append router's process
(``kraft_spark.proxy``) and a thread that keeps it told who leads.

Used by the Spark application (``kraft.http.host``/``kraft.http.port``; the sidecar then serves
on a loopback port of the driver) and by ``kraft-spark local --http-port`` with
``--node-http-base-port``. Appends go straight to the leader's own HTTP API over kept-alive
connections, everything else to the sidecar. The driver's Python process also runs the
materializer, the observer and py4j; an append forwarded there waited behind them (issue 39:
the driver's endpoint at 0.61x the leader's own API).

``leader_url`` is asked every ``interval_s``: the driver reads its observer's leader (cheap,
every 20 ms); ``local`` asks the quorum (DescribeQuorum, every 250 ms). With no node HTTP API
or no leader, appends go through the sidecar, which waits out an election.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO, Final
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

WATCH_INTERVAL_S: Final = 0.02
START_TIMEOUT_S: Final = 30.0


class FrontError(RuntimeError):
    pass


class HttpFront:
    """The router process and the thread that keeps it told who leads."""

    def __init__(self, host: str, port: int, sidecar_port: int, *, max_connections: int,
                 header_timeout_s: float, leader_url: Callable[[], str | None],
                 interval_s: float = WATCH_INTERVAL_S,
                 on_stop: Callable[[], None] | None = None) -> None:
        self._leader_url = leader_url
        self._on_stop = on_stop
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "kraft_spark.proxy", "--listen", f"{host}:{port}",
             "--sidecar", f"127.0.0.1:{sidecar_port}",
             "--max-connections", str(max_connections),
             "--header-timeout", str(header_timeout_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.port = self._wait_listening(host, port)
        self._told: str | None = "?"
        self._thread = threading.Thread(target=self._watch, name="http-front", daemon=True)
        self._thread.start()

    def _wait_listening(self, host: str, port: int) -> int:
        out = self._proc.stdout
        assert out is not None
        timer = threading.Timer(START_TIMEOUT_S, self._proc.kill)
        timer.start()
        try:
            line = out.readline()
        finally:
            timer.cancel()
        if not line:
            code = self._proc.wait()
            raise FrontError(f"the HTTP address {host}:{port} could not be served (the router "
                             f"exited {code}; its reason is above); choose another "
                             "kraft.http.port")
        return int(json.loads(line)["listening"].rpartition(":")[2])

    def _watch(self) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        while not self._stop.wait(self._interval_s):
            try:
                url = self._leader_url()
            except Exception:  # the observer is being replaced: ask again next turn
                continue
            if url == self._told:
                continue
            if not self._tell(stdin, url):
                if not self._stop.is_set():
                    log.error("the HTTP router exited (%s): the application's address is not "
                              "served", self._proc.poll())
                return

    def _tell(self, stdin: IO[str], url: str | None) -> bool:
        target = "-"
        if url is not None:
            parts = urlsplit(url)
            target = f"{parts.hostname}:{parts.port}"
        try:
            stdin.write(f"leader {target}\n")
            stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        self._told = url
        return True

    def stop(self) -> None:
        """Closes the router's input: it stops accepting and exits."""
        self._stop.set()
        self._thread.join(5)
        if self._on_stop is not None:
            self._on_stop()
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
