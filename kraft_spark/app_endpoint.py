"""``<warehouse>/_kraft_spark/endpoint.json``: where the running application serves HTTP.

With ``spark-submit --deploy-mode cluster`` the driver runs on a host the cluster manager
chooses, so a client cannot know the HTTP address in advance; the warehouse is the one location
every party already shares (its URI is in the submission). The driver writes this file once it
serves (atomically: ``WarehouseFiles.write``) and removes it when it stops; ``kraft-spark``
commands that take an address (``--endpoint``, ``--url``) also take ``--warehouse URI`` and
read it from here. ``<data-dir>/sql.endpoint`` is the same idea for the driver's own host.

A local path (or ``file:``) is read directly; other URIs through pyarrow's file systems (``s3a``
read as ``s3``; ``gs``, ``hdfs`` where pyarrow has them), since a client has no Spark JVM.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import Any

from kraft_spark.commands.warehouse_flag import DIRECTORY, FILE
from kraft_spark.errors import CommandError
from kraft_spark.warehouse.location import WarehouseFiles, is_uri, normalize_warehouse

log = logging.getLogger("kraft_spark.driver")

_ANY_ADDRESS = ("", "0.0.0.0", "::", "[::]")
# Warehouses this process recorded its address in: only those are withdrawn at its stop (an
# application that failed to start must not remove the file of one that runs).
_published: set[str] = set()


def advertised_url(host: str, port: int, driver_host: str) -> str:
    """The URL a client on another host uses: a wildcard bind is named by the driver's
    address (spark.driver.host, the one executors reach it by)."""
    name = driver_host if host in _ANY_ADDRESS else host
    return f"http://{f'[{name}]' if ':' in name else name}:{port}"


def publish(warehouse: str, spark: Any, info: dict[str, Any]) -> None:
    """Record ``info`` (``http``, ``cluster_id``, ...) beside the tables; a failure is logged,
    not fatal: clients can still be given the address by hand."""
    body = {**info, "published_at_ms": int(time.time() * 1000)}
    try:
        WarehouseFiles(warehouse, spark).write(json.dumps(body).encode() + b"\n",
                                               DIRECTORY, FILE)
        _published.add(warehouse)
    except Exception as exc:  # OSError, Py4JJavaError
        log.warning("could not record the HTTP address in %s/%s/%s: %s", warehouse, DIRECTORY,
                    FILE, exc)


def withdraw(warehouse: str, spark: Any) -> None:
    """The application stops: no address to give any more."""
    if warehouse not in _published:
        return
    _published.discard(warehouse)
    with contextlib.suppress(Exception):
        WarehouseFiles(warehouse, spark).delete(DIRECTORY, FILE)


def _read(warehouse: str) -> bytes:
    location = normalize_warehouse(warehouse)
    if not is_uri(location):
        with open(f"{location}/{DIRECTORY}/{FILE}", "rb") as fh:
            return fh.read()
    from pyarrow import fs  # type: ignore[import-untyped]  # no stubs

    uri = location.replace("s3a://", "s3://", 1)
    filesystem, path = fs.FileSystem.from_uri(f"{uri}/{DIRECTORY}/{FILE}")
    with filesystem.open_input_stream(path) as stream:
        data: bytes = stream.read()
        return data


def read(warehouse: str) -> dict[str, Any]:
    """What the running application recorded. Raises CommandError (exit 1) naming the file."""
    where = f"{warehouse.rstrip('/')}/{DIRECTORY}/{FILE}"
    try:
        info: dict[str, Any] = json.loads(_read(warehouse))
    except FileNotFoundError:
        raise CommandError(f"{where}: no address recorded; is the application running with "
                           "this warehouse (kraft.warehouse.uri)?", 1) from None
    except (OSError, ValueError, ImportError) as exc:
        raise CommandError(f"cannot read {where} ({exc}); pass the address instead", 1) from None
    return info


def resolve_args(args: Any) -> None:
    """Replace the address arguments (``endpoint``, ``url``) by the warehouse's record when
    ``--warehouse`` was given (the CLI calls it before every command)."""
    warehouse = getattr(args, "endpoint_warehouse", None)
    if not warehouse:
        return
    url = http_url(warehouse)
    for name in ("endpoint", "url"):
        if hasattr(args, name):
            setattr(args, name, url)


def http_url(warehouse: str) -> str:
    """The application's HTTP URL, as recorded in ``warehouse``."""
    url = read(warehouse).get("http")
    if not isinstance(url, str) or not url:
        raise CommandError(f"{warehouse}/{DIRECTORY}/{FILE} names no HTTP address", 1)
    return url
