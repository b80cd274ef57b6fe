"""SIGINT/SIGTERM as a stop request (kraft_spark/stop_signals.py), in real child processes."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import pytest

from kraft_spark.stop_signals import StopSignals

# A child like `kraft-spark run`: a busy extra thread (a signal may be delivered to it and only
# noticed by the main thread later, anywhere in its wait loop) and a main thread waiting.
_CHILD = """
import sys, threading
from kraft_spark.stop_signals import StopSignals
def spin():
    n = 0
    while True:
        n += 1
threading.Thread(target=spin, daemon=True).start()
stop = StopSignals()
stop.install()
print("ready", flush=True)
while not stop.wait(0.05):
    pass
print("stopped", stop.received, flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_at_any_moment_stops_the_wait(signum: int) -> None:
    rng = random.Random(signum)
    for _ in range(8):
        child = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE,
                                 text=True)
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.0, 0.12))  # anywhere in the wait loop's cycle
            child.send_signal(signum)
            out, _ = child.communicate(timeout=10)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == 0
        assert out.strip() == f"stopped [{int(signum)}]"


def test_wait_returns_false_when_nothing_arrives() -> None:
    stop = StopSignals()  # not installed: nothing can arrive
    started = time.monotonic()
    assert stop.wait(0.15) is False
    assert time.monotonic() - started >= 0.15
    assert not stop.requested
