"""The driver's background work yields the CPU to the voters (Linux nice values, per thread).

On one machine (local mode, and any host that runs the driver beside executors) the Spark JVM
and the materializer threads share the cores with the voters, and their bursts (a Delta commit
every ``kraft.materialize.interval.ms``, the JIT compiler in the first minutes, Spark jobs)
land on the commit path: measured with wrk at one connection straight to the leader, 1,000
appends/s with materialization paused against 750 with it running, p99 1.9 against 7 ms.
A higher nice value keeps all that work running, only behind the voters when both want a
core. Raising one's own nice value needs no privilege; nothing here lowers one.

The JVM is reniced thread by thread (Linux nice values are per thread; threads it starts later
inherit the value of the thread that starts them). Python workers it forked before (the
pyspark daemon and the voters it forked) keep theirs.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Final

# CFS weight of nice 15 against nice 0: about 1 to 29. Measured (wrk, one connection to the
# leader, steady state, 5 runs each): nice 0 737-763 appends/s, p99 6.8-7.4 ms; nice 5
# 705-918, p99 3.5-6.0 ms; nice 15 755-867, p99 2.3-5.5 ms.
BACKGROUND_NICE: Final = 15


def _renice(tid: int, nice: int) -> bool:
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) < nice:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        return True
    except (OSError, AttributeError):  # gone, not Linux, or not allowed
        return False


def lower_this_thread(nice: int = BACKGROUND_NICE) -> None:
    """The calling thread runs behind the voters from now on."""
    _renice(threading.get_native_id(), nice)


def lower_process_threads(pid: int, nice: int = BACKGROUND_NICE) -> int:
    """Every current thread of process ``pid``; returns how many were reniced."""
    with contextlib.suppress(OSError):
        return sum(_renice(int(tid), nice) for tid in os.listdir(f"/proc/{pid}/task"))
    return 0
