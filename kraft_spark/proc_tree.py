"""Processes by their parent links in Linux's ``/proc`` (empty answers elsewhere), and a child
that stops with its parent."""

from __future__ import annotations

import os
import signal
import sys

# Set by a parent (``kraft-spark local``) in the environment of the nodes it starts: its pid.
PARENT_ENV = "KRAFT_SPARK_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def parent_of(pid: int) -> int:
    """The parent process id of ``pid`` (-1 when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            # the command name (field 2) may hold spaces and parentheses: split after it
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def descendants(root: int) -> list[int]:
    """The live processes below ``root``, nearest first."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if entry.isdigit():
            children.setdefault(parent_of(int(entry)), []).append(int(entry))
    found, queue = [], [root]
    while queue:
        below = children.get(queue.pop(0), [])
        found += below
        queue += below
    return found


def stop_with_parent() -> bool:
    """In a process started with ``KRAFT_SPARK_PARENT_PID`` (``kraft-spark local``'s nodes): ask
    Linux to send it SIGTERM when that parent dies, SIGKILL included (``PR_SET_PDEATHSIG``), so a
    node never outlives the command that started it; if the parent died before this call (its
    pid is no longer our parent's) SIGTERM comes at once. The variable is removed so that this
    process's own children do not inherit it. True when the request is in force; False
    without the variable or off Linux."""
    expected = os.environ.pop(PARENT_ENV, "")
    if not expected.isdigit() or not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return False
    if os.getppid() != int(expected):
        os.kill(os.getpid(), signal.SIGTERM)
    return True
