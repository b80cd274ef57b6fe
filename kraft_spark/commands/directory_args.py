"""Directory ids on the command line: ``join_directory_ids``, applied to every command's
arguments before parsing (kept apart from ``quorum_admin`` so that doing so costs no import).

Kafka's directory ids are URL-safe base64: one in 32 starts with "-", which argparse takes for
an option (``--controller-directory-id -JweK07fQEKB8EDLMonlsw``: "expected one argument")."""

from __future__ import annotations

import re
from collections.abc import Sequence

_DIRECTORY_FLAGS = ("--controller-directory-id", "-d")
_DIRECTORY_TEXT = re.compile(r"^-[A-Za-z0-9_-]{21}$")


def join_directory_ids(argv: Sequence[str]) -> list[str]:
    """``argv`` with a directory id that starts with ``-`` joined to its flag
    (``--controller-directory-id=-Jwe...``), so it is read as the value it is."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if (argv[i] in _DIRECTORY_FLAGS and i + 1 < len(argv)
                and _DIRECTORY_TEXT.match(argv[i + 1])):
            out.append(f"--controller-directory-id={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out
