"""Delta materialization of the committed log (docs/concepts/delta-tables.md).

``DeltaMaterializer`` writes committed batches into the ``records``, ``snapshot`` and
``quorum_events`` tables exactly once; ``snapshot`` and ``history_of_key`` read them back.
Importing this package needs pyspark; it does not start Spark.
"""

from kraft_spark.delta.maintenance import Compaction
from kraft_spark.delta.materializer import (
    CommitStats,
    DeltaMaterializer,
    TableCommit,
)
from kraft_spark.delta.snapshot import history_of_key, snapshot, snapshot_version
from kraft_spark.delta.tables import (
    QUORUM_EVENTS,
    RECORDS,
    SNAPSHOT,
    TABLES,
    CommitMetadata,
    MaterializerError,
)

__all__ = [
    "QUORUM_EVENTS",
    "RECORDS",
    "SNAPSHOT",
    "TABLES",
    "CommitMetadata",
    "CommitStats",
    "Compaction",
    "DeltaMaterializer",
    "MaterializerError",
    "TableCommit",
    "history_of_key",
    "snapshot",
    "snapshot_version",
]
