"""``meta.properties``: who owns a log directory, written once by ``kraft-spark format``.

Kafka's layout (Java properties)::

    #
    # written by kraft-spark format
    cluster.id=<id>
    directory.id=<22-character base64url UUID>
    node.id=<n>
    version=1

``directory.id`` identifies this copy of the disk: a node that comes back with a new one lost its
log (docs/concepts/protocol.md) and must catch up before it votes. It is a random UUID in
Kafka's text form
(URL-safe base64 without padding).
"""

from __future__ import annotations

import base64
import posixpath
import random
import re
import uuid
from dataclasses import dataclass

from kraft_spark.log.checkpoints import atomic_write, ensure_dir, partition_dir
from kraft_spark.log.errors import MetaPropertiesError, NotFormattedError
from kraft_spark.log.fs import FileSystem, RealFileSystem

META_PROPERTIES_FILE = "meta.properties"
LOCK_FILE = ".lock"
META_VERSION = 1
_CLUSTER_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str
    version: int = META_VERSION

    def to_bytes(self) -> bytes:
        lines = [
            "#",
            "# written by kraft-spark format",
            f"cluster.id={self.cluster_id}",
            f"directory.id={self.directory_id}",
            f"node.id={self.node_id}",
            f"version={self.version}",
        ]
        return ("\n".join(lines) + "\n").encode("utf-8")


def new_directory_id(rng: random.Random | None = None) -> str:
    """A random UUID in Kafka's text form; pass ``rng`` for a reproducible one (simulator)."""
    raw = uuid.UUID(int=rng.getrandbits(128), version=4).bytes if rng else uuid.uuid4().bytes
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def validate_cluster_id(cluster_id: str) -> None:
    if not _CLUSTER_ID.fullmatch(cluster_id):
        raise ValueError(
            f"invalid cluster id {cluster_id!r}: use 1-128 characters from A-Z a-z 0-9 . _ -"
        )


def parse_meta_properties(data: bytes, path: str) -> MetaProperties:
    props: dict[str, str] = {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetaPropertiesError(f"{path}: not UTF-8 text") from exc
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        props[key.strip()] = value.strip()
    missing = [k for k in ("version", "cluster.id", "node.id", "directory.id") if k not in props]
    if missing:
        raise MetaPropertiesError(f"{path}: missing {', '.join(missing)}")
    try:
        version = int(props["version"])
        node_id = int(props["node.id"])
    except ValueError as exc:
        raise MetaPropertiesError(f"{path}: version and node.id must be integers") from exc
    if version != META_VERSION:
        raise MetaPropertiesError(f"{path}: version {version} is not supported (only 1)")
    return MetaProperties(props["cluster.id"], node_id, props["directory.id"], version)


def read_meta_properties(log_dir: str, fs: FileSystem | None = None) -> MetaProperties | None:
    """The identity of ``log_dir``; None if it has never been formatted."""
    fs = fs or RealFileSystem()
    path = posixpath.join(log_dir, META_PROPERTIES_FILE)
    if not fs.exists(path):
        return None
    return parse_meta_properties(fs.read(path), path)


def check_meta_properties(
    log_dir: str, fs: FileSystem, *, cluster_id: str | None, node_id: int | None
) -> MetaProperties:
    """Refuse a directory that is unformatted or belongs to another node or cluster."""
    path = posixpath.join(log_dir, META_PROPERTIES_FILE)
    try:
        meta = read_meta_properties(log_dir, fs)
    except MetaPropertiesError as exc:
        raise MetaPropertiesError(
            f"{exc}. To recover: restore the file (version=1, cluster.id, node.id, "
            "directory.id), or move the directory aside, `kraft-spark format` a new one and "
            "start the node with node.disk.lost=true to fetch everything from the leader"
        ) from exc
    if meta is None:
        raise NotFormattedError(
            f"{log_dir} is not formatted ({path} does not exist); run `kraft-spark format "
            f"--cluster-id ID --node-id N --log-dir {log_dir}` first"
        )
    if node_id is not None and meta.node_id != node_id:
        raise MetaPropertiesError(
            f"{path}: node.id is {meta.node_id} but this node is configured with node.id "
            f"{node_id}; the directory belongs to another node"
        )
    if cluster_id is not None and meta.cluster_id != cluster_id:
        raise MetaPropertiesError(
            f"{path}: cluster.id is {meta.cluster_id!r} but this node is configured with "
            f"cluster.id {cluster_id!r}; the directory belongs to another cluster"
        )
    return meta


def format_log_dir(
    log_dir: str,
    *,
    cluster_id: str,
    node_id: int,
    fs: FileSystem | None = None,
    directory_id: str | None = None,
    ignore_formatted: bool = False,
    lock_timeout_s: float = 0.0,
) -> MetaProperties:
    """Write ``meta.properties`` and create the metadata partition directory.

    Holds the directory lock while it works. If the directory is already formatted for the same
    cluster and node it is left alone when ``ignore_formatted`` (and refused otherwise); a
    directory of another node or cluster is always refused.
    """
    fs = fs or RealFileSystem()
    validate_cluster_id(cluster_id)
    if not 0 <= node_id <= 2**31 - 1:  # an int32 on the wire (ReplicaId, CandidateId, ...)
        raise ValueError(f"node id must be from 0 to 2147483647, got {node_id}")
    ensure_dir(fs, log_dir)
    lock = fs.lock(posixpath.join(log_dir, LOCK_FILE), lock_timeout_s)
    try:
        path = posixpath.join(log_dir, META_PROPERTIES_FILE)
        existing = read_meta_properties(log_dir, fs)
        if existing is not None:
            check_meta_properties(log_dir, fs, cluster_id=cluster_id, node_id=node_id)
            if not ignore_formatted:
                raise MetaPropertiesError(
                    f"{path} already exists (cluster.id {existing.cluster_id}, node.id "
                    f"{existing.node_id}); pass --ignore-formatted to accept it"
                )
            ensure_dir(fs, partition_dir(log_dir))
            return existing
        meta = MetaProperties(cluster_id, node_id, directory_id or new_directory_id())
        atomic_write(fs, path, meta.to_bytes())
        ensure_dir(fs, partition_dir(log_dir))
        return meta
    finally:
        lock.release()
