"""Processes by their parent links in Linux's ``/proc`` (empty answers elsewhere)."""

from __future__ import annotations

import os


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
