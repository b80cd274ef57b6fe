"""Where delta-rs finds the warehouse's tables, and the few whole-file operations its commits need
besides delta-rs's own: putting a data file before the commit that adds it, removing one no
commit took, reading ``_last_checkpoint``, and making a local commit durable.

A ``TableStore`` is a local directory (a path on the driver's file system, a shared mount
included) or a URI delta-rs serves (S3, GCS, ADLS, HDFS: ``storage_options.DELTA_RS_SCHEMES``)
with its storage options. Durability differs, and this is the one place that knows it:

- A local directory: a data file is written and fsync'd with its directory entry before the
  commit that references it, and each commit file after it is made (delta-rs's local store
  does not fsync), so a power loss leaves no commit pointing at a torn file and no gap.
- An object store: a PUT is durable once acknowledged, and delta-rs makes each commit with a
  put-if-absent (S3's conditional write), so two writers cannot both take a version. The file
  operations go through delta-rs's own object store (``deltalake.fs.DeltaStorageHandler``),
  so they use the same credentials as its commits.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from kraft_spark.delta.storage_options import served_by_delta_rs, storage_options
from kraft_spark.log.fs import RealFileSystem


def store_for(warehouse: str, spark_conf: Mapping[str, str]) -> TableStore | None:
    """The ``TableStore`` of ``warehouse`` (a local path, or a URI delta-rs serves, with the
    storage options of ``spark_conf``'s Hadoop keys); None for a URI only Spark can open."""
    parsed = urlparse(warehouse)
    if not parsed.scheme:
        return TableStore.at(warehouse)
    if parsed.scheme.lower() == "file" and parsed.netloc in ("", "localhost"):
        return TableStore.at(parsed.path or "/")
    if served_by_delta_rs(warehouse):
        return TableStore.at(warehouse, storage_options(warehouse, spark_conf))
    return None


class StoreRefused(OSError):
    """An object store's refusal, named (``named_store_errors``). An ``OSError`` as delta-rs's
    own: it may pass (a network blip, S3's SlowDown), so the driver logs it and retries."""


@contextmanager
def named_store_errors(store: TableStore | None) -> Iterator[None]:
    """An object store's refusal (delta-rs raises ``OSError`` with the HTTP exchange) as a
    ``StoreRefused`` naming the warehouse, the storage options delta-rs was given and
    where they come from; a local directory's errors pass unchanged."""
    try:
        yield
    except OSError as exc:
        if store is None or store.local:
            raise
        # delta-rs's text: colour codes and one "↳" line per cause; one line here.
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).replace("↳", ":")
        detail = " ".join(plain.split())[:300]
        given = ", ".join(sorted(store.options)) or "none"
        raise StoreRefused(
            f"{store.root}: the object store refused delta-rs ({detail}). Storage options "
            f"given: {given} (from the Spark configuration's spark.hadoop.* keys; delta-rs "
            "also reads AWS_*, AZURE_* and GOOGLE_* from the driver's environment). Check the "
            "credentials, the endpoint and that the bucket or container exists"
        ) from exc


def spark_conf_of(spark: Any) -> dict[str, str]:
    """The Spark application's configuration (``SparkConf``, public API) as a dict."""
    return dict(spark.sparkContext.getConf().getAll())


@dataclass(frozen=True)
class TableStore:
    """The warehouse ``root`` (an absolute local path, or a URI without a trailing slash) and
    delta-rs's storage ``options`` for it."""

    root: str
    options: Mapping[str, str] = field(default_factory=dict)
    _filesystems: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def at(cls, warehouse: str, options: Mapping[str, str] | None = None) -> TableStore:
        if urlparse(warehouse).scheme:
            return cls(warehouse.rstrip("/"), dict(options or {}))
        return cls(os.path.abspath(warehouse), dict(options or {}))

    @property
    def local(self) -> bool:
        return not urlparse(self.root).scheme

    def uri(self, table: str) -> str:
        """The table's location as delta-rs opens it."""
        if self.local:
            return os.path.join(self.root, table)
        return posixpath.join(self.root, table)

    def storage_options(self) -> dict[str, str] | None:
        return dict(self.options) if self.options else None

    def put_parquet(self, table: str, name: str, rows: Any) -> tuple[int, int]:
        """Write the Arrow table ``rows`` as the Parquet file ``name`` of ``table`` (snappy),
        durable when this returns; return its size and modification time (ms since the epoch)
        as an ``add`` action records them."""
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        if self.local:
            directory = self.uri(table)
            target = os.path.join(directory, name)
            pq.write_table(rows, target, compression="snappy")
            make_durable(target, directory)
            info = os.stat(target)
            return info.st_size, int(info.st_mtime * 1000)
        fs = self._filesystem(table)
        pq.write_table(rows, name, filesystem=fs, compression="snappy")
        return int(fs.get_file_info([name])[0].size), int(time.time() * 1000)

    def delete(self, table: str, name: str) -> None:
        if self.local:
            os.unlink(os.path.join(self.uri(table), name))
        else:
            self._filesystem(table).delete_file(name)

    def read(self, table: str, name: str) -> bytes | None:
        """The file ``name`` of ``table`` (``_delta_log/_last_checkpoint``...), None if absent."""
        if self.local:
            try:
                with open(os.path.join(self.uri(table), name), "rb") as fh:
                    return fh.read()
            except FileNotFoundError:
                return None
        from pyarrow.fs import FileType  # type: ignore[import-untyped]

        fs = self._filesystem(table)
        if fs.get_file_info([name])[0].type == FileType.NotFound:
            return None
        with fs.open_input_file(name) as fh:
            return bytes(fh.read())

    def written_commits_durable(self, table: str, first: int, last: int) -> None:
        """Make commits ``first``..``last`` of ``table`` that delta-rs wrote with their own data
        files (a MERGE, a compaction) durable on a local directory, each after its files
        (delta-rs fsyncs neither): the files its ``add`` actions name, the table's directory,
        then the commit and ``_delta_log``. Read from the commits themselves, so the work grows
        with the change, not with the table. Nothing on an object store."""
        if not self.local:
            return
        directory = self.uri(table)
        fs = RealFileSystem()
        for version in range(first, last + 1):
            commit = os.path.join(directory, "_delta_log", f"{version:020d}.json")
            with open(commit, encoding="utf-8") as fh:
                actions = [json.loads(line) for line in fh if line.strip()]
            added = [action["add"]["path"] for action in actions if "add" in action]
            for path in added:
                # Relative and percent-encoded ("my%20file"), or an absolute URI (Delta spec).
                local = urlparse(path).path if "://" in path else os.path.join(directory, path)
                fs.fsync(unquote(local))
            if added:
                fs.fsync_dir(directory)
            self.commit_durable(table, version)

    def commit_durable(self, table: str, version: int) -> None:
        """Make commit ``version`` of ``table`` durable: fsync its file and the log directory on
        a local directory; nothing on an object store (the commit's PUT already was)."""
        if not self.local:
            return
        log_dir = os.path.join(self.uri(table), "_delta_log")
        make_durable(os.path.join(log_dir, f"{version:020d}.json"), log_dir)

    def checkpoint_durable(self, table: str, version: int) -> None:
        """Make the checkpoint of ``version`` delta-rs just wrote durable on a local directory:
        its Parquet part(s), then ``_last_checkpoint`` (which names it), then ``_delta_log``.
        A torn checkpoint that ``_last_checkpoint`` names would send every reader back to the
        JSON commits at best. Nothing on an object store."""
        if not self.local:
            return
        log_dir = os.path.join(self.uri(table), "_delta_log")
        fs = RealFileSystem()
        prefix = f"{version:020d}.checkpoint"
        for name in sorted(os.listdir(log_dir)):
            if name.startswith(prefix) and name.endswith(".parquet"):
                fs.fsync(os.path.join(log_dir, name))
        make_durable(os.path.join(log_dir, "_last_checkpoint"), log_dir)

    def created_durable(self, table: str) -> None:
        """Make a table delta-rs just created durable on a local directory: its first commit
        and ``_delta_log``, then the directories that hold them (``_delta_log`` in the table's,
        the table's in the warehouse). A power loss must not leave a torn first commit, which
        no reader could open. Nothing on an object store (the PUT already was)."""
        if not self.local:
            return
        self.commit_durable(table, 0)
        directory = self.uri(table)
        make_durable(os.path.join(directory, "_delta_log"), directory)
        make_durable(directory, self.root)

    def _filesystem(self, table: str) -> Any:
        """A pyarrow file system rooted at ``table`` on delta-rs's own object store (its
        documented ``DeltaStorageHandler``), so files go where, and with the credentials,
        delta-rs's commits do."""
        fs = self._filesystems.get(table)
        if fs is None:
            from deltalake.fs import DeltaStorageHandler
            from pyarrow.fs import PyFileSystem

            fs = self._filesystems[table] = PyFileSystem(
                DeltaStorageHandler(self.uri(table), self.storage_options()))
        return fs


def make_durable(file: str, directory: str) -> None:
    """fsync ``file``, then its entry in ``directory`` (the log's own file system calls)."""
    fs = RealFileSystem()
    fs.fsync(file)
    fs.fsync_dir(directory)
