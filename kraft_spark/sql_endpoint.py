"""``<data-dir>/sql.endpoint``: the ``sc://host:port`` URL of the running application's Spark
Connect server (``driver/sql_server.py``), written while it runs and read by ``kraft-spark
sql``."""

from __future__ import annotations

import contextlib
import os

from kraft_spark.log.checkpoints import atomic_write
from kraft_spark.log.fs import RealFileSystem

ENDPOINT_FILE = "sql.endpoint"


def url_of(host: str, port: int) -> str:
    return f"sc://{f'[{host}]' if ':' in host else host}:{port}"


def publish(data_dir: str, url: str) -> None:
    """Name the running server in the data directory (atomically, durably), creating the
    directory on a first start (``make run``'s ``./data`` does not exist yet)."""
    os.makedirs(data_dir, exist_ok=True)
    atomic_write(RealFileSystem(), os.path.join(data_dir, ENDPOINT_FILE), (url + "\n").encode())


def withdraw(data_dir: str) -> None:
    """The application stops: no server to name any more."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(data_dir, ENDPOINT_FILE))


def published(data_dir: str) -> str | None:
    """The ``sc://`` URL a running application published, None when there is none."""
    try:
        with open(os.path.join(data_dir, ENDPOINT_FILE), encoding="utf-8") as fh:
            url = fh.read().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return url if url.startswith("sc://") else None
