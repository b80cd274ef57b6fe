"""``log-start-offset-checkpoint``: the persisted log start offset, in Kafka's file format.

Kafka keeps one such file per log directory, a version line, a count line and one
``<topic> <partition> <offset>`` line per partition. The start offset only moves forward
(retention, installing a snapshot); a missing file means 0. Written atomically (temp file,
fsync, rename, fsync dir).
"""

from __future__ import annotations

import posixpath

from kraft_spark.log.checkpoints import PARTITION_DIR_NAME, atomic_write
from kraft_spark.log.fs import FileSystem

LOG_START_FILE = "log-start-offset-checkpoint"
_TOPIC, _PARTITION = PARTITION_DIR_NAME.rsplit("-", 1)


def write_log_start(fs: FileSystem, log_dir: str, offset: int) -> None:
    text = f"0\n1\n{_TOPIC} {_PARTITION} {offset}\n"
    atomic_write(fs, posixpath.join(log_dir, LOG_START_FILE), text.encode())


def read_log_start(fs: FileSystem, log_dir: str) -> int:
    """The persisted start (0 if none). Raises ValueError naming the file if it is damaged."""
    path = posixpath.join(log_dir, LOG_START_FILE)
    if not fs.exists(path):
        return 0
    lines = fs.read(path).decode("utf-8", "replace").split("\n")
    try:
        if lines[0] != "0" or int(lines[1]) != 1:
            raise ValueError("unknown version or count")
        topic, partition, offset = lines[2].split(" ")
        if (topic, partition) != (_TOPIC, _PARTITION) or int(offset) < 0:
            raise ValueError(f"unexpected entry {lines[2]!r}")
        return int(offset)
    except (IndexError, ValueError) as exc:
        raise ValueError(f"{path}: malformed log start offset checkpoint ({exc})") from exc
