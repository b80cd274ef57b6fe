"""Where the warehouse is: a local path or a Hadoop-compatible URI (``kraft.warehouse.uri``),
and its files beside the Delta tables (the ``_raft_snapshots`` directory).

``file:`` URIs become plain paths: the driver then writes the tables in-process (direct
appends, delta-rs's MERGE), which a shared mount (NFS, a cluster file system) supports as well
as a local disk. Other schemes (``hdfs://``, ``s3a://``, ``abfss://``, ``gs://``) go through
Spark and Hadoop's ``FileSystem``, whose connector jars and credentials the Spark configuration
provides (README: deploying on a cluster).
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from typing import Any
from urllib.parse import urlparse

from kraft_spark.secret_files import private_dir

# ``<data-dir>/warehouse.location``: the warehouse the application last ran with, so
# `kraft-spark sql --data-dir` finds it wherever kraft.warehouse.uri put it.
LOCATION_FILE = "warehouse.location"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


class WarehouseError(RuntimeError):
    """The warehouse cannot be used; the message names the setting, the cause and the fix."""


def is_uri(warehouse: str) -> bool:
    return _SCHEME.match(warehouse) is not None


def normalize_warehouse(uri: str) -> str:
    """A plain absolute path for local (``file:``) warehouses, the URI otherwise. Raises
    ValueError naming ``kraft.warehouse.uri`` for one that cannot be right."""
    uri = uri.strip()
    match = _SCHEME.match(uri)
    if match is None:
        return os.path.abspath(os.path.expanduser(uri))
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"kraft.warehouse.uri {uri!r}: a file: URI names no host; write "
                             "file:///path (a directory every host mounts at that path)")
        return os.path.abspath(parsed.path or "/")
    if len(scheme) == 1:  # a Windows drive letter is no scheme we serve
        raise ValueError(f"kraft.warehouse.uri {uri!r}: not a path or a URI")
    if not parsed.netloc and not uri.startswith(f"{match.group(1)}:///"):
        raise ValueError(f"kraft.warehouse.uri {uri!r}: expected {scheme}://<authority>/<path> "
                         f"(for example s3a://bucket/kraft or hdfs://namenode:8020/kraft)")
    return uri.rstrip("/")


def warehouse_of(data_dir: str) -> str:
    """The warehouse the application of ``data_dir`` ran with (its default if unknown)."""
    try:
        with open(os.path.join(data_dir, LOCATION_FILE), encoding="utf-8") as fh:
            return fh.read().strip() or os.path.join(data_dir, "warehouse")
    except OSError:
        return os.path.join(data_dir, "warehouse")


class WarehouseFiles:
    """Whole-file reads and writes under the warehouse: the local file system for paths, the
    Spark JVM's Hadoop ``FileSystem`` for URIs (``spark`` needed then)."""

    def __init__(self, warehouse: str, spark: Any = None) -> None:
        self.warehouse = warehouse
        self._spark = spark
        self._fs: Any = None
        if is_uri(warehouse):
            if spark is None:
                raise WarehouseError(f"{warehouse}: a URI warehouse is reached through Spark")
            jvm = spark.sparkContext._jvm
            conf = spark.sparkContext._jsc.hadoopConfiguration()
            self._jvm = jvm
            self._fs = jvm.org.apache.hadoop.fs.Path(warehouse).getFileSystem(conf)

    def _path(self, *names: str) -> Any:
        target = os.path.join(self.warehouse, *names)
        return self._jvm.org.apache.hadoop.fs.Path(target) if self._fs is not None else target

    def list(self, *names: str) -> list[str]:
        """File names in the directory (empty if it does not exist), hidden ones left out
        (our temporary files, Hadoop's ``.crc`` checksums)."""
        if self._fs is None:
            try:
                found = os.listdir(os.path.join(self.warehouse, *names))
            except FileNotFoundError:
                return []
        else:
            path = self._path(*names)
            if not self._fs.exists(path):
                return []
            found = [str(s.getPath().getName()) for s in self._fs.listStatus(path)]
        return sorted(name for name in found if not name.startswith("."))

    def read(self, *names: str) -> bytes:
        if self._fs is None:
            with open(os.path.join(self.warehouse, *names), "rb") as fh:
                return fh.read()
        stream = self._fs.open(self._path(*names))
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write(self, data: bytes, *names: str) -> None:
        """Write a whole file under a temporary name, then rename it into place (readers see
        all of it or none; on object stores the rename is a copy, still all or none)."""
        final = os.path.join(self.warehouse, *names)
        tmp_name = f".{names[-1]}.{uuid.uuid4().hex[:8]}.tmp"
        if self._fs is None:
            private_dir(os.path.dirname(final))
            tmp = os.path.join(os.path.dirname(final), tmp_name)
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            return
        parent = self._path(*names[:-1])
        self._fs.mkdirs(parent)
        tmp = self._jvm.org.apache.hadoop.fs.Path(parent, tmp_name)
        out = self._fs.create(tmp, True)
        try:
            out.write(bytearray(data))
            out.hsync()
        finally:
            out.close()
        target = self._path(*names)
        self._fs.delete(target, False)
        if not self._fs.rename(tmp, target):
            raise WarehouseError(f"{final}: rename from {tmp_name} failed")

    def delete(self, *names: str) -> None:
        if self._fs is None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(self.warehouse, *names))
            return
        self._fs.delete(self._path(*names), False)


def check_writable(warehouse: str, spark: Any = None) -> None:
    """Create the warehouse if needed and write and delete a probe file in it. Raises
    WarehouseError naming the cause and the fix (unreachable, not writable, no connector)."""
    probe = f"_probe-{uuid.uuid4().hex[:8]}"
    try:
        files = WarehouseFiles(warehouse, spark)
        files.write(b"kraft-spark\n", probe)
        files.delete(probe)
    except WarehouseError:
        raise
    except Exception as exc:  # OSError, Py4JJavaError (no FileSystem for scheme, auth, ...)
        cause = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else repr(exc)
        if "Py4J" in type(exc).__name__:
            cause = _java_cause(exc)
        fix = ("for a path: create it or choose a writable one" if not is_uri(warehouse) else
               "check that the scheme's connector is on Spark's classpath (s3a: "
               "spark.jars.packages org.apache.hadoop:hadoop-aws), its credentials and that "
               "the location exists")
        raise WarehouseError(f"kraft.warehouse.uri {warehouse}: cannot write there ({cause}); "
                             f"{fix}") from exc


def _java_cause(exc: Exception) -> str:
    java = getattr(exc, "java_exception", None)
    if java is not None:
        with contextlib.suppress(Exception):
            return str(java.toString())[:300]
    return str(exc).splitlines()[0][:300]


__all__ = ["WarehouseError", "WarehouseFiles", "check_writable", "is_uri",
           "normalize_warehouse", "warehouse_of"]
