"""Secrets on disk: tokens and keys in files only their owner can read, as ssh keeps its keys.

Invariants:

* a secret file is created with mode 0600 before a byte of the secret is written (``O_CREAT``
  with the mode, then ``fchmod`` in case a umask or an older file widened it), and replaced
  atomically (a reader sees the old secret or the new one, never half of one);
* a secret file that its group or others can read (or write) is refused when read, with the
  ``chmod`` that fixes it: a token others can read is a token others hold;
* directories that hold secrets or data are created owner-only (0700);
* no function here logs or formats a secret's value: errors name the file, never its content.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Final

TOKEN_BYTES = 32  # 256 bits, url-safe base64: 43 characters


class SecretFileError(Exception):
    """A secret file that cannot be used; the message names the file and the fix."""


# The HTTP API's credentials in a data directory (``kraft_spark.http_auth``), here so that a
# command can look for the file without importing the HTTP layer's hashing.
CREDENTIALS_FILE: Final = "http-credentials"


def new_token() -> str:
    """A fresh random token (url-safe, 43 characters) that does not start with ``-``: one in 64
    did, and a command line then took ``--token -x...`` for an option (``expected one
    argument``), a failure that came and went with the generated credentials. Drawing again
    costs about 0.03 bits of its 256."""
    import secrets  # here: ~8 ms (random, hashlib) a command reading a token does without

    while True:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if not token.startswith("-"):
            return token


def private_dir(path: str) -> str:
    """Create ``path`` and each missing parent owner-only; an existing directory keeps its
    mode (the operator chose it). Returns ``path``. (``os.makedirs``'s mode applies to the
    last directory only: the parents it creates would be 0755.)"""
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:  # created meanwhile by another process
            if not os.path.isdir(directory):
                raise
    return path


def write_secret(path: str, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600, atomically and durably."""
    directory = os.path.dirname(os.path.abspath(path))
    private_dir(directory)
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def check_private(path: str) -> None:
    """Refuse a secret file its group or others can access (ssh's rule)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise SecretFileError(f"{path}: no such file") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretFileError(
            f"{path}: permissions {stat.S_IMODE(mode):04o} are too open (others could read the "
            f"secret in it); run `chmod 600 {path}`"
        )


def read_secret(path: str) -> str:
    """The secret kept in ``path`` (surrounding whitespace stripped), after
    :func:`check_private`. An empty file is an error."""
    check_private(path)
    with open(path, encoding="utf-8") as fh:
        text = fh.read().strip()
    if not text:
        raise SecretFileError(f"{path}: the file is empty; put the secret in it")
    return text


def remove_secret(path: str) -> None:
    """Delete a secret file if it exists (a server that stops takes its token with it)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
