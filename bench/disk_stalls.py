"""Disk stalls during a benchmark point, seen by an independent probe.

On a shared virtual disk a durable write sometimes takes tens or hundreds of milliseconds
instead of a fraction of one, for every process at once. A sequential client then waits for the
stall, and wrk, which corrects for coordinated omission, counts a stall of S ms at one request
every R ms as about S/R requests that took S ms, so a single 200 ms stall in a 10 s point can
make its p99 200 ms. To tell such a tail from one of the system under test, each point runs
beside a separate process (``python -m bench.disk_stalls``) that makes a small write durable
every ``INTERVAL_MS`` in the same file system (``DurableFile``, written into reserved space
and fdatasync'd, as the voters' segments are) and reports the ones slower than ``STALL_MS``.

Its own load is small next to the point's (50 durable writes a second of 512 bytes, against
hundreds to thousands of the system's), it runs in a process of its own so that it takes no
time from a load generator in the bench's process, and it is reported, never used to correct
a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from types import FrameType

from kraft_spark.log.bench import DurableFile

INTERVAL_MS = 20.0
STALL_MS = 20.0
BLOCK = 512
RESERVE = 16 << 20  # 32,768 writes (11 minutes) before the probe starts a new file


@dataclass(frozen=True)
class StallReport:
    """What the probe saw: ``syncs`` durable writes, ``stalls`` of them over ``STALL_MS``."""

    syncs: int
    stalls: int
    max_ms: float
    """The slowest durable write of all (stall or not)."""
    stalled_ms: float
    """The stalls' time added up."""

    def as_dict(self) -> dict[str, float | int]:
        return {"syncs": self.syncs, "stalls": self.stalls, "max_ms": round(self.max_ms, 1),
                "stalled_ms": round(self.stalled_ms, 1)}


def probe(directory: str, interval_ms: float, stall_ms: float,
          stop: threading.Event) -> StallReport:
    """Durable writes in ``directory`` every ``interval_ms`` until ``stop`` is set; what they
    took."""
    syncs = stalls = 0
    max_s = stalled_s = 0.0
    block = b"s" * BLOCK
    while not stop.is_set():
        fd, path = tempfile.mkstemp(prefix="disk-stalls-", suffix=".bin", dir=directory)
        os.close(fd)
        with DurableFile(path, reserve=RESERVE) as durable:
            for _ in range(RESERVE // BLOCK):
                if stop.is_set():
                    break
                started = time.perf_counter()
                durable.write(block)
                took = time.perf_counter() - started
                syncs += 1
                max_s = max(max_s, took)
                if took * 1000 > stall_ms:
                    stalls += 1
                    stalled_s += took
                time.sleep(max(0.0, interval_ms / 1000 - took))
    return StallReport(syncs, stalls, max_s * 1000, stalled_s * 1000)


class DiskStallWatch:
    """``with DiskStallWatch(directory) as watch: ...``; then ``watch.report``. The probe runs
    in a child process from ``__enter__`` to ``__exit__``."""

    def __init__(self, directory: str, *, interval_ms: float = INTERVAL_MS,
                 stall_ms: float = STALL_MS) -> None:
        self._argv = [sys.executable, "-m", "bench.disk_stalls", directory,
                      "--interval-ms", str(interval_ms), "--stall-ms", str(stall_ms)]
        self._proc: subprocess.Popen[str] | None = None
        self.report: StallReport | None = None

    def __enter__(self) -> DiskStallWatch:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
        self._proc = subprocess.Popen(self._argv, stdout=subprocess.PIPE, text=True, env=env)
        assert self._proc.stdout is not None
        ready = self._proc.stdout.readline()  # its SIGTERM handler is in place
        if ready.strip() != "ready":
            self._proc.kill()
            self._proc.wait()
            raise RuntimeError(f"the disk-stall probe did not start (exit {self._proc.poll()})")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        proc = self._proc
        assert proc is not None
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            if exc_type is None:
                raise RuntimeError("the disk-stall probe did not stop within 10 s") from None
            return
        if exc_type is not None:  # the point failed: its error is the one to see
            return
        if proc.returncode != 0 or not out.strip():
            raise RuntimeError(
                f"the disk-stall probe failed (exit {proc.returncode}); its error is above")
        self.report = StallReport(**json.loads(out.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.disk_stalls",
        description="durable writes every --interval-ms until SIGTERM; prints one JSON line "
                    "with the count of those slower than --stall-ms")
    parser.add_argument("directory")
    parser.add_argument("--interval-ms", type=float, default=INTERVAL_MS)
    parser.add_argument("--stall-ms", type=float, default=STALL_MS)
    args = parser.parse_args(argv)
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    print("ready", flush=True)
    try:
        report = probe(args.directory, args.interval_ms, args.stall_ms, stop)
    except OSError as exc:
        print(f"disk-stall probe: cannot make durable writes in {args.directory}: {exc}; "
              "give it a directory it can write", file=sys.stderr, flush=True)
        return 2
    print(json.dumps(asdict(report)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
