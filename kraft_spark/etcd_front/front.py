"""The etcd address users are given, as its host process runs it: the front's process
(``kraft_spark.etcd_front.process``) and a thread that keeps it told which nodes serve etcd's
API (``nodes()``, asked every ``interval_s``: the Spark driver's voters change with each
generation of the barrier stage, and it puts the leader's first)."""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Final

log = logging.getLogger(__name__)

START_TIMEOUT_S: Final = 30.0


class EtcdFrontError(RuntimeError):
    pass


class EtcdFront:
    """The front's process and the thread that keeps it told where the nodes are."""

    def __init__(self, host: str, port: int, nodes: Callable[[], Sequence[str]], *,
                 interval_s: float | None = 0.2, setting: str = "--etcd-port") -> None:
        """``interval_s``: how often ``nodes()`` is asked again (None: never, they are
        fixed); ``setting``: what the user changes when ``port`` cannot be bound."""
        self._nodes = nodes
        self._interval_s = interval_s
        self._stop = threading.Event()
        first = list(nodes())
        self._told = first
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "kraft_spark.etcd_front", "--listen", f"{host}:{port}",
             "--nodes", ",".join(first) or "-"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._where = (host, port, setting)
        self._port: int | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it serves on, once it listens (the first call waits for it, so the
        process's start-up overlaps whatever its parent starts meanwhile). Raises
        EtcdFrontError if it could not listen."""
        if self._port is None:
            self._port = self._wait_listening(*self._where)
            if self._interval_s is not None:
                self._thread = threading.Thread(target=self._watch, name="etcd-front",
                                                daemon=True)
                self._thread.start()
        return self._port

    def _wait_listening(self, host: str, port: int, setting: str) -> int:
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
            raise EtcdFrontError(f"etcd's API could not be served on {host}:{port} (the front "
                                 f"exited {code}; its reason is above); choose another "
                                 f"{setting}")
        return int(json.loads(line)["listening"].rpartition(":")[2])

    def _watch(self) -> None:
        stdin = self._proc.stdin
        assert stdin is not None and self._interval_s is not None
        while not self._stop.wait(self._interval_s):
            try:
                nodes = list(self._nodes())
            except Exception:  # the driver's voters are being replaced: ask again next turn
                continue
            if nodes == self._told:
                continue
            try:
                stdin.write(f"nodes {','.join(nodes) or '-'}\n")
                stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                if not self._stop.is_set():
                    log.error("the etcd front exited (%s): the application's etcd address is "
                              "not served", self._proc.poll())
                return
            self._told = nodes

    def stop(self) -> None:
        """Closes the front's input: it stops accepting and exits."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
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
