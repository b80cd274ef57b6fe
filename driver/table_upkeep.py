"""The driver's upkeep of the warehouse, from the thread that commits quorum_events and
snapshot: ``records``' checkpoints and compaction (Spark/JVM work, seconds) and the copies of
the observer's Raft snapshots into ``<warehouse>/_raft_snapshots`` (the start of a restore)."""

from __future__ import annotations

import logging
import time
from typing import Any

from driver.console import progress

log = logging.getLogger("kraft_spark.driver")

# records' checkpoints and compaction run at most this often (TableUpkeep.maintain).
MAINTENANCE_INTERVAL_S = 10.0


# The cycle that commits quorum_events and snapshot (a Spark MERGE, 1-3 s on 2 busy cores) and
# checkpoints and compacts may take at most this share of the time: with a MERGE every 5 s, the
# Spark jobs took the cores from the voters and the sidecar, and one-client HTTP appends to the
# application had p90 2.7-3.7 ms and p99 6.8-8.6 ms (0.75-0.88 ms and 3.1-3.9 ms without it).
FULL_CYCLE_MAX_SHARE = 0.1
# With delta-rs's MERGE (a local warehouse) the cycle is no Spark job: tens of ms on idle cores,
# 1-2 s while the voters are busy, because the materializer runs at nice 15
# (driver/cpu_priority.py) and so only takes the CPU the voters leave: the nice value is what
# protects them now, and the cycle may follow at the configured interval (share 1: no
# stretching). Stretched to 3 x the cycle (share 0.25) behind nice 15, `snapshot` fell 4.1-4.8 s
# behind the log at 100 appends/s (`kraft-spark bench app`: 4 commits in 20 s).
FULL_CYCLE_MAX_SHARE_RS = 1.0


def full_cycle_wait(interval_s: float, last_cycle_s: float,
                    share: float = FULL_CYCLE_MAX_SHARE) -> float:
    """Seconds to wait before the next cycle: the configured interval, or longer, so that
    cycles take at most ``share`` of the time."""
    return max(interval_s, last_cycle_s * (1 - share) / share)


class TableUpkeep:
    def __init__(self, app: Any) -> None:
        self.app = app
        self._due = 0.0  # when records' checkpoint/compaction may run next
        self._copier: Any = None

    def maintain(self, materializer: Any) -> None:
        """At most every MAINTENANCE_INTERVAL_S and then spending at most 10 % of the time
        (see TABLE_EXTRA_PROPERTIES): the 1 s snapshot cycle is not held to their pace."""
        self.copy_snapshots()
        if time.monotonic() < self._due:
            return
        from kraft_spark.delta.tables import RECORDS

        started = time.monotonic()
        try:
            materializer.checkpoint(RECORDS)
        except Exception:
            log.warning("checkpoint of records failed", exc_info=True)
        self.compact(materializer)
        took = time.monotonic() - started
        self._due = time.monotonic() + full_cycle_wait(MAINTENANCE_INTERVAL_S, took)

    def copy_snapshots(self) -> None:
        """Copy the observer's newest Raft snapshot into the warehouse if it is new. A failure
        is logged and retried next cycle (the warehouse keeps the older copy)."""
        observer = self.app._observer
        if observer is None:
            return
        from kraft_spark.warehouse.location import WarehouseFiles
        from kraft_spark.warehouse.snapshot_copies import SnapshotCopier

        try:
            if self._copier is None:
                self._copier = SnapshotCopier(WarehouseFiles(self.app.config.warehouse,
                                                             self.app.spark))
            self._copier.copy_new(observer.keeper.store)
        except Exception:
            log.warning("copying the Raft snapshot to the warehouse failed; will retry",
                        exc_info=True)

    def compact(self, materializer: Any) -> None:
        """OPTIMIZE each table holding ``compact_min_files`` data files or more, from the thread
        that commits quorum_events and snapshot (so never racing their commits; records' blind
        appends from the other thread do not conflict with it). A failure is logged and the
        next cycle tries again: the tables stay correct either way, only slower to read."""
        from kraft_spark.delta.tables import TABLES

        metrics = self.app.app_metrics
        for table in TABLES:
            try:
                done = materializer.compact(table, self.app.config.compact_min_files)
            except Exception:
                metrics.delta_compaction_failures.labels(table).inc()
                log.warning("compaction of %s failed; will retry", table, exc_info=True)
                continue
            if done is not None:
                metrics.delta_compactions.labels(table).inc()
                metrics.delta_compacted_files.labels(table).inc(done.files_removed)
                progress(f"compacted {table}: {done.files_removed} files into "
                         f"{done.files_added} in {done.seconds:.1f} s")
