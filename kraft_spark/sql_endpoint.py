"""``<data-dir>/sql.endpoint`` and ``<data-dir>/sql.token``: the ``sc://host:port`` URL of the
running application's Spark Connect server (``driver/sql_server.py``) and the token it requires,
written while it runs and read by ``kraft-spark sql`` (:func:`connect_url`).

The token file is the credential: mode 0600, refused when others can read it
(``kraft_spark.secret_files``). Whoever holds it can do anything Spark can in the application
(run code as its user, drop the tables), so it never leaves the owner's files.

pyspark sends a token only over a channel it trusts: TLS, or its local credentials, which it
uses when the URL's host is the word ``localhost``. The server listens on loopback by default,
so the URL a client is given says ``localhost``; a server bound elsewhere needs TLS in front
(docs/operations/security.md)."""

from __future__ import annotations

import contextlib
import os

from kraft_spark.addresses import is_loopback
from kraft_spark.log.checkpoints import atomic_write
from kraft_spark.log.fs import RealFileSystem
from kraft_spark.secret_files import private_dir, read_secret, remove_secret, write_secret

ENDPOINT_FILE = "sql.endpoint"
TOKEN_FILE = "sql.token"


def url_of(host: str, port: int) -> str:
    return f"sc://{f'[{host}]' if ':' in host else host}:{port}"


def publish(data_dir: str, url: str, token: str | None = None) -> None:
    """Name the running server (and keep its token, owner-only) in the data directory,
    atomically and durably, creating the directory on a first start."""
    private_dir(data_dir)
    if token is not None:
        write_secret(os.path.join(data_dir, TOKEN_FILE), token + "\n")
    atomic_write(RealFileSystem(), os.path.join(data_dir, ENDPOINT_FILE), (url + "\n").encode())


def withdraw(data_dir: str) -> None:
    """The application stops: no server to name any more, no token to keep."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(data_dir, ENDPOINT_FILE))
    remove_secret(os.path.join(data_dir, TOKEN_FILE))


def connect_url(data_dir: str) -> str | None:
    """The URL a client passes to ``SparkSession.builder.remote``: the published server with
    its token (``sc://localhost:PORT/;token=...``), None when no application runs. Raises
    ``SecretFileError`` when the token file is unreadable or others can read it."""
    url = published(data_dir)
    if url is None:
        return None
    token_path = os.path.join(data_dir, TOKEN_FILE)
    if not os.path.exists(token_path):
        return url  # a server started without a token (kraft.sql.authenticate=false)
    token = read_secret(token_path)
    host, _, port = url[len("sc://"):].rpartition(":")
    if is_loopback(host):
        host = "localhost"  # pyspark sends the token over local credentials only then
    return f"sc://{host}:{port}/;token={token}"


def published(data_dir: str) -> str | None:
    """The ``sc://`` URL a running application published, None when there is none."""
    try:
        with open(os.path.join(data_dir, ENDPOINT_FILE), encoding="utf-8") as fh:
            url = fh.read().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return url if url.startswith("sc://") else None
