"""Small state files replaced atomically: ``quorum-state`` and the atomic-write helper.

Layout of a log directory (``log.dirs``), as Kafka's KRaft has it::

    <log_dir>/meta.properties                    written once by ``kraft-spark format``
    <log_dir>/.lock                              flock'd by the process that owns the directory
    <log_dir>/__cluster_metadata-0/              the metadata partition
        00000000000000000000.log / .index        segments
        leader-epoch-checkpoint                  epoch cache (text)
        quorum-state                             election state (JSON)

Atomic replacement: write ``<name>.tmp``, fsync it, rename it over ``<name>``, fsync the
directory. A crash leaves either the old or the new file, never a mix; a leftover ``.tmp`` is
ignored (and removed when the log is opened).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any

from kraft_spark.log.errors import QuorumStateError
from kraft_spark.log.fs import FileSystem, RealFileSystem

PARTITION_DIR_NAME = "__cluster_metadata-0"
QUORUM_STATE_FILE = "quorum-state"
EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
TMP_SUFFIX = ".tmp"

# Kafka's QuorumStateData v0 fields, in the order Kafka writes them, and their JSON types.
QUORUM_STATE_FIELDS: dict[str, type] = {
    "clusterId": str,
    "leaderId": int,
    "leaderEpoch": int,
    "votedId": int,
    "appliedOffset": int,
    "currentVoters": list,
    "data_version": int,
}
QUORUM_STATE_DATA_VERSION = 0


def partition_dir(log_dir: str) -> str:
    """``<log_dir>/__cluster_metadata-0``."""
    return posixpath.join(log_dir, PARTITION_DIR_NAME)


def ensure_dir(fs: FileSystem, path: str) -> None:
    """Create ``path`` if missing and make its entry durable (fsync the parent)."""
    if not fs.exists(path):
        fs.makedirs(path)
        fs.fsync_dir(posixpath.dirname(posixpath.normpath(path)) or ".")


def atomic_write(fs: FileSystem, path: str, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync the directory."""
    tmp = path + TMP_SUFFIX
    fs.write_file(tmp, data)
    fs.fsync(tmp)
    fs.rename(tmp, path)
    fs.fsync_dir(posixpath.dirname(path) or ".")


# ---------------------------------------------------------------------------------------------
# quorum-state


def _check_quorum_state(state: Mapping[str, Any], where: str) -> None:
    for name, kind in QUORUM_STATE_FIELDS.items():
        if name not in state:
            raise QuorumStateError(f"{where}: missing field {name!r}")
        value = state[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise QuorumStateError(
                f"{where}: field {name!r} must be {kind.__name__}, got {value!r}"
            )
    for voter in state["currentVoters"]:
        voter_id = voter.get("voterId") if isinstance(voter, dict) else None
        if not isinstance(voter_id, int) or isinstance(voter_id, bool):
            raise QuorumStateError(
                f"{where}: currentVoters entries must be {{\"voterId\": int}}, got {voter!r}"
            )
    if state["data_version"] != QUORUM_STATE_DATA_VERSION:
        raise QuorumStateError(
            f"{where}: data_version {state['data_version']} is not supported "
            f"(only {QUORUM_STATE_DATA_VERSION})"
        )


def encode_quorum_state(state: Mapping[str, Any]) -> bytes:
    """Kafka's compact JSON: its fields in its order, then any extra keys as given."""
    full = dict(state)
    full.setdefault("data_version", QUORUM_STATE_DATA_VERSION)
    _check_quorum_state(full, "quorum-state to write")
    ordered = {name: full[name] for name in QUORUM_STATE_FIELDS}
    ordered.update((k, v) for k, v in full.items() if k not in QUORUM_STATE_FIELDS)
    return json.dumps(ordered, separators=(",", ":")).encode("utf-8")


def decode_quorum_state(data: bytes, where: str = "quorum-state") -> dict[str, Any]:
    try:
        state = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise QuorumStateError(f"{where}: not valid JSON ({exc})") from exc
    if not isinstance(state, dict):
        raise QuorumStateError(f"{where}: expected a JSON object")
    _check_quorum_state(state, where)
    return state


def read_quorum_state(log_dir: str, fs: FileSystem | None = None) -> dict[str, Any] | None:
    """The election state of the node owning ``log_dir`` (the ``log.dirs`` directory, not the
    partition directory), or None if it was never written. Extra keys are returned as stored.

    Raises ``QuorumStateError`` naming the file if it exists but is not a valid state.
    """
    fs = fs or RealFileSystem()
    path = posixpath.join(partition_dir(log_dir), QUORUM_STATE_FILE)
    if not fs.exists(path):
        return None
    try:
        return decode_quorum_state(fs.read(path), path)
    except QuorumStateError as exc:
        raise QuorumStateError(
            f"{exc}. To recover: move {path} aside and start the node with "
            "node.disk.lost=true; it then votes again only once it has caught up, so a vote "
            "it may have given in its last epoch is never given twice") from exc


def write_quorum_state(
    log_dir: str, state: Mapping[str, Any], fs: FileSystem | None = None
) -> None:
    """Atomically replace the election state of ``log_dir``; durable when this returns.

    ``state`` needs Kafka's fields (clusterId, leaderId, leaderEpoch, votedId, appliedOffset,
    currentVoters as ``[{"voterId": n}]``; data_version defaults to 0); other keys pass through.
    """
    fs = fs or RealFileSystem()
    data = encode_quorum_state(state)
    pdir = partition_dir(log_dir)
    ensure_dir(fs, pdir)
    atomic_write(fs, posixpath.join(pdir, QUORUM_STATE_FILE), data)
