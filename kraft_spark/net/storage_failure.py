"""What a node does when its log directory fails (ENOSPC, EIO, EROFS on append, fsync, roll).

The choice, with reasons: **stop the process with exit code 74 and let the supervisor restart
it with backoff**, which reopens the log from its last durable state. Kafka halts a controller on
a log-dir failure and etcd panics on a WAL write error for the same reason: after a failed
write or fsync the page cache and the file may disagree (a failed fsync cannot be retried, its
dirty pages may be gone), and only a reopen, which re-reads and re-validates the log from disk,
knows what is durable. Retrying in place would serve from a state nobody can vouch for.

A leader that stops this way resigns at once in effect: its port refuses connections, and the
followers campaign after a short random delay (the refused-connection rule), ~0.3 s.

The supervisor (``kraft-spark local``; the Spark driver relaunches a failed voter task) restarts
a node that exited with :data:`STORAGE_FAILURE_EXIT` after 1, 2, 4 ... up to 30 s; while the
disk stays full, each restart fails again at its first write and backs off further, never
spinning. Exit code 74 is ``EX_IOERR`` of sysexits.h.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from typing import Final

STORAGE_FAILURE_EXIT: Final = 74


# Errnos that say the disk failed, not that the directory is wrong: at start-up too they mean
# "restart me later" (exit 74), where a refusal (not formatted, another cluster) exits 1.
DISK_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EIO, errno.EROFS, errno.EDQUOT})


def _os_errors(exc: BaseException) -> Iterator[OSError]:
    """The OSErrors among ``exc`` and what caused it, outermost first."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError):
            yield cause
        cause = cause.__cause__


def is_disk_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is an OSError with one of DISK_ERRNOS."""
    return any(cause.errno in DISK_ERRNOS for cause in _os_errors(exc))


class StorageFailure(Exception):
    """The node stopped because its log directory failed; ``str`` names the directory, the
    operation and the errno."""


def storage_failure_text(exc: BaseException) -> str:
    """One line for the log: the failure, and the errno's name when one is known."""
    text = str(exc)
    cause = next(_os_errors(exc), None)
    if cause is not None and cause.errno is not None:
        name = errno.errorcode.get(cause.errno, str(cause.errno))
        if name not in text:
            text = f"{text} ({name})"
    return text
