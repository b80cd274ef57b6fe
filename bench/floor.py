"""The physical floor of one replicated commit on this machine, measured in the same run.

* **fsync**: a durable 4 KiB write to a file in the benchmark's data directory, many times, in
  two ways: appended to a growing file and ``os.fsync``'d, and written inside space reserved
  beforehand (``posix_fallocate``) and ``os.fdatasync``'d, as kraft-spark's preallocated
  segments do. The one with the lower p50 is the floor (the stricter choice); both are reported.
* **loopback round trip**: 100 bytes to an echo thread over a TCP_NODELAY loopback connection
  and back; p50 / p99.

The **commit floor** they imply for a 3-voter quorum is ``fsync + 2 × round trip``: the client's
request reaches the leader and its answer returns (one round trip), the leader's pending Fetch
answer carries the record to a follower and that follower's next Fetch tells the leader it is
durable (one more round trip), and the follower's fsync sits between the two halves. The
leader's own fsync overlaps the follower's, so it adds nothing to the floor.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from kraft_spark.log.bench import DurableFile

FSYNC_BLOCK = 4096
ECHO_BYTES = 100


FSYNC_APPEND = "4 KiB append + fsync"
FSYNC_RESERVED = "4 KiB write into reserved space + fdatasync"


@dataclass(frozen=True)
class Floor:
    fsync_p50_ms: float
    fsync_p99_ms: float
    rtt_p50_ms: float
    rtt_p99_ms: float
    fsync_kind: str = FSYNC_APPEND
    """Which durable write the fsync figures are (the faster of the two at p50)."""
    other_fsync_p50_ms: float | None = None
    """The p50 of the other kind, for the report."""

    @property
    def commit_floor_ms(self) -> float:
        return self.fsync_p50_ms + 2 * self.rtt_p50_ms


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an already sorted, non-empty list."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def fsync_latencies(
    directory: str, seconds: float, max_samples: int = 5000, *, reserved: bool = False
) -> list[float]:
    """Seconds per durable 4 KiB write on a file under ``directory``, sorted: appended and
    fsync'd, or (``reserved``) written inside preallocated space and fdatasync'd."""
    path = os.path.join(directory, "fsync-floor.bin")
    block = b"\1" * FSYNC_BLOCK
    samples: list[float] = []
    with DurableFile(path, (max_samples + 1) * FSYNC_BLOCK if reserved else 0) as durable:
        durable.write(block)  # the first sync also writes the inode; not part of the floor
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at and len(samples) < max_samples:
            started = time.perf_counter()
            durable.write(block)
            samples.append(time.perf_counter() - started)
    return sorted(samples)


# The echo peer is another process, as a quorum's peers are: a round trip then includes the
# wake-up of a process on the other core, not a thread switch under the same GIL.
_ECHO_PROGRAM = """
import socket, sys
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    data = conn.recv(65536)
    if not data:
        break
    conn.sendall(data)
"""


def loopback_round_trips(seconds: float, max_samples: int = 20000) -> list[float]:
    """Seconds per 100-byte ping-pong over loopback TCP with an echo process, sorted."""
    echo = subprocess.Popen([sys.executable, "-c", _ECHO_PROGRAM], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert echo.stdout is not None
        port = int(echo.stdout.readline())
        samples: list[float] = []
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            payload = b"p" * ECHO_BYTES
            stop_at = time.monotonic() + seconds
            while time.monotonic() < stop_at and len(samples) < max_samples:
                started = time.perf_counter()
                conn.sendall(payload)
                got = 0
                while got < ECHO_BYTES:
                    chunk = conn.recv(ECHO_BYTES - got)
                    if not chunk:
                        raise ConnectionError("echo thread closed the connection")
                    got += len(chunk)
                samples.append(time.perf_counter() - started)
        echo.wait(5)
    finally:
        if echo.poll() is None:
            echo.kill()
            echo.wait(5)
        if echo.stdout is not None:
            echo.stdout.close()
    return sorted(samples)


def measure_floor(directory: str, seconds: float = 3.0) -> Floor:
    appended = fsync_latencies(directory, seconds / 2)
    reserved = fsync_latencies(directory, seconds / 2, reserved=True)
    rtts = loopback_round_trips(seconds)
    kinds = sorted(
        [(percentile(appended, 0.5), FSYNC_APPEND, appended),
         (percentile(reserved, 0.5), FSYNC_RESERVED, reserved)],
        key=lambda k: k[0],
    )
    (best_p50, kind, fsyncs), (other_p50, _, _) = kinds
    return Floor(
        fsync_p50_ms=round(best_p50 * 1000, 3),
        fsync_p99_ms=round(percentile(fsyncs, 0.99) * 1000, 3),
        rtt_p50_ms=round(percentile(rtts, 0.50) * 1000, 3),
        rtt_p99_ms=round(percentile(rtts, 0.99) * 1000, 3),
        fsync_kind=kind,
        other_fsync_p50_ms=round(other_p50 * 1000, 3),
    )
