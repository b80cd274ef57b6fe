"""The physical floor of one replicated commit on this machine, measured in the same run.

* **fsync**: append 4 KiB to a file in the benchmark's data directory and ``os.fsync`` it, many
  times; the p50 / p99 of one such durable append.
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

FSYNC_BLOCK = 4096
ECHO_BYTES = 100


@dataclass(frozen=True)
class Floor:
    fsync_p50_ms: float
    fsync_p99_ms: float
    rtt_p50_ms: float
    rtt_p99_ms: float

    @property
    def commit_floor_ms(self) -> float:
        return self.fsync_p50_ms + 2 * self.rtt_p50_ms


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an already sorted, non-empty list."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def fsync_latencies(directory: str, seconds: float, max_samples: int = 5000) -> list[float]:
    """Seconds per (write 4 KiB + fsync) on a file under ``directory``, sorted."""
    path = os.path.join(directory, "fsync-floor.bin")
    block = b"\0" * FSYNC_BLOCK
    samples: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, block)  # the first fsync also writes the inode; not part of the floor
        os.fsync(fd)
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at and len(samples) < max_samples:
            started = time.perf_counter()
            os.write(fd, block)
            os.fsync(fd)
            samples.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        os.unlink(path)
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
    fsyncs = fsync_latencies(directory, seconds)
    rtts = loopback_round_trips(seconds)
    return Floor(
        fsync_p50_ms=round(percentile(fsyncs, 0.50) * 1000, 3),
        fsync_p99_ms=round(percentile(fsyncs, 0.99) * 1000, 3),
        rtt_p50_ms=round(percentile(rtts, 0.50) * 1000, 3),
        rtt_p99_ms=round(percentile(rtts, 0.99) * 1000, 3),
    )
