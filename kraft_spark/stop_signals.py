"""SIGINT/SIGTERM as a stop request that a process's main thread waits for.

Not ``threading.Event``: Python runs a signal handler in the main thread between two bytecodes,
and that can be inside ``Event.wait()`` while the thread holds the Event's internal lock (on the
way in or out of the wait, e.g. when the signal was delivered to another thread and is only
noticed once the wait times out). A handler calling ``Event.set()`` then waits forever for a lock
its own thread holds: ``kraft-spark run`` was seen ignoring SIGINT and SIGTERM that way
(py-spy: the handler blocked in ``Condition.__enter__`` under ``Event.wait``). The handler here
only appends to a list, which takes no lock, and ``wait`` sleeps in short steps.
"""

from __future__ import annotations

import signal
import time
from types import FrameType

_STEP_S = 0.1


class StopSignals:
    """Install with ``install()`` (main thread only); then ``wait(timeout)`` or ``requested``."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def install(self, signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> None:
        for signum in signals:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)

    @property
    def requested(self) -> bool:
        return bool(self.received)

    def wait(self, timeout_s: float) -> bool:
        """Sleep until a stop is requested or ``timeout_s`` passes; True if requested."""
        deadline = time.monotonic() + timeout_s
        while not self.received:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(_STEP_S, left))
        return True


__all__ = ["StopSignals"]
