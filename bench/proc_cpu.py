"""CPU seconds from Linux's ``/proc``: of a process, of every process, of the whole machine.

The lease bench samples them at both ends of a window so that a figure for the leader comes
with where the rest of the machine's time went: the other members, the load generator, other
processes on the (shared) machine, and the kernel's own time (loopback TCP is softirq work that
no process is charged for).
"""

from __future__ import annotations

import os
import time

from bench.lease_stats import CpuWindow

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split around it
    head, _, rest = text.rpartition(")")
    return [head.partition("(")[2], *rest.split()]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, every thread (0 when it is gone)."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[12]) + int(fields[13])) / CLOCK_TICKS


def every_process() -> dict[int, tuple[str, float]]:
    """Each live process: (its command name, its CPU seconds so far)."""
    out: dict[int, tuple[str, float]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if entry.isdigit() and (fields := _stat_fields(int(entry))) is not None:
            out[int(entry)] = (fields[0], (int(fields[12]) + int(fields[13])) / CLOCK_TICKS)
    return out


def machine_ticks() -> tuple[int, int]:
    """(busy, total) ticks of every CPU since boot, from ``/proc/stat``'s first line."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
    except OSError:
        return 0, 0
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest times are already counted in user and nice
    return total - idle, total


class CpuSample:
    def __init__(self, leader: int, members: list[int]) -> None:
        self.at = time.monotonic()
        self.leader = leader
        self.members = members
        self.procs = every_process()
        self.generator = time.process_time()
        self.busy, self.total = machine_ticks()

    def _of(self, pid: int) -> float:
        return self.procs.get(pid, ("", 0.0))[1]

    def until(self, end: CpuSample, top: int = 3) -> CpuWindow:
        mine = {*self.members, os.getpid()}
        others: dict[str, float] = {}
        for pid, (name, cpu) in end.procs.items():
            if pid not in mine:
                # a process started in the window is charged all its CPU
                others[name] = others.get(name, 0.0) + cpu - self._of(pid)
        ranked = sorted(((n, round(s, 2)) for n, s in others.items() if s >= 0.05),
                        key=lambda item: -item[1])
        total = end.total - self.total
        return CpuWindow(
            seconds=end.at - self.at,
            leader_s=end._of(self.leader) - self._of(self.leader),
            members_s=sum(end._of(p) - self._of(p) for p in self.members),
            generator_s=end.generator - self.generator,
            machine_busy=(end.busy - self.busy) / total if total else 0.0,
            machine_s=(end.busy - self.busy) / CLOCK_TICKS,
            others_s=sum(s for _, s in ranked),
            top_others=tuple(ranked[:top]))
