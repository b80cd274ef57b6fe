"""Durable storage: Kafka v2 record batches in segments, the epoch cache, quorum-state.

Modules, one concern each:

* ``codec``: encode/decode Kafka v2 record batches (CRC-32C), header checks.
* ``fs`` / ``simfs``: the file-system seam (real files, or a simulated disk that crashes).
* ``segment``, ``index``: one ``.log`` file and its sparse offset index.
* ``epoch_cache``: first offset of every epoch, ``leader-epoch-checkpoint``.
* ``recovery``: what opening a directory validates, cuts and rebuilds.
* ``segmented_log``: ``SegmentedLog``, the ``RaftLog`` the node and the simulator use.
* ``checkpoints``, ``meta``: ``quorum-state``, ``meta.properties``, formatting, atomic writes.
* ``dump``, ``bench``, ``commands``: the ``dump-log``, ``bench storage`` and ``format`` tools.
"""

from kraft_spark.log.checkpoints import (
    PARTITION_DIR_NAME,
    partition_dir,
    read_quorum_state,
    write_quorum_state,
)
from kraft_spark.log.codec import (
    BatchHeader,
    TruncatedBatchError,
    decode_batch,
    decode_batches,
    encode_batch,
    iter_batches,
    validate_batch,
)
from kraft_spark.log.errors import (
    CorruptRecordError,
    InvalidAppendError,
    LogDirLockedError,
    LogError,
    MetaPropertiesError,
    NotFormattedError,
    QuorumStateError,
)
from kraft_spark.log.fs import FileSystem, RealFileSystem
from kraft_spark.log.meta import (
    MetaProperties,
    format_log_dir,
    new_directory_id,
    read_meta_properties,
)
from kraft_spark.log.segmented_log import DEFAULT_SEGMENT_BYTES, SegmentedLog
from kraft_spark.log.simfs import SimulatedFileSystem

__all__ = [
    "DEFAULT_SEGMENT_BYTES",
    "PARTITION_DIR_NAME",
    "BatchHeader",
    "CorruptRecordError",
    "FileSystem",
    "InvalidAppendError",
    "LogDirLockedError",
    "LogError",
    "MetaProperties",
    "MetaPropertiesError",
    "NotFormattedError",
    "QuorumStateError",
    "RealFileSystem",
    "SegmentedLog",
    "SimulatedFileSystem",
    "TruncatedBatchError",
    "decode_batch",
    "decode_batches",
    "encode_batch",
    "format_log_dir",
    "iter_batches",
    "new_directory_id",
    "partition_dir",
    "read_meta_properties",
    "read_quorum_state",
    "validate_batch",
    "write_quorum_state",
]
