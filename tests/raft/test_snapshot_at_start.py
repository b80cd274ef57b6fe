"""The leader finds the snapshot at its log start among every snapshot it holds (found by the
simulator: seed 30025 with --lease-clients 4, where a follower installed snapshot 233-2 while
holding 151-1, led after taking 236-3, and answered a fetch in epoch 2 with DivergingEpoch
(0, 0), truncating a follower's committed log)."""

from __future__ import annotations

from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch, Record
from kraft_spark.raft.replication import diverging_epoch, snapshot_to_send
from kraft_spark.raft.snapshot_api import NoSnapshots
from kraft_spark.raft.snapshot_log import SnapshotAwareLog
from kraft_spark.sim.memlog import MemoryLog


class HeldSnapshots(NoSnapshots):
    def __init__(self, *held: OffsetAndEpoch) -> None:
        self.held = sorted(held, key=lambda s: (s.offset, s.epoch))

    def ids(self) -> list[OffsetAndEpoch]:
        return list(self.held)

    def earliest_id(self) -> OffsetAndEpoch | None:
        return self.held[0] if self.held else None

    def latest_id(self) -> OffsetAndEpoch | None:
        return self.held[-1] if self.held else None


def _leader_log(*held: OffsetAndEpoch) -> SnapshotAwareLog:
    log = MemoryLog()
    log.truncate_fully_to(233, 2)  # installed 233-2
    for offset in range(233, 238):
        log.append(Batch(offset, 3, (Record(b"k", b"v", 0),)))
    return SnapshotAwareLog(log, HeldSnapshots(*held))


def test_the_snapshot_at_the_start_is_found_between_older_and_newer_ones() -> None:
    log = _leader_log(OffsetAndEpoch(151, 1), OffsetAndEpoch(233, 2), OffsetAndEpoch(236, 3))
    assert log.snapshot_at_start() == OffsetAndEpoch(233, 2)
    # A follower of epoch 2 past the start: its epoch-2 suffix diverges at the snapshot's end,
    # never at (0, 0) (which would cut its committed log).
    assert diverging_epoch(log, 242, 2) == OffsetAndEpoch(233, 2)
    # One of epoch 1 is older than the snapshot at the start: it downloads the latest snapshot.
    assert snapshot_to_send(log, 242, 1) == OffsetAndEpoch(236, 3)


def test_without_a_snapshot_at_the_start_nothing_is_invented() -> None:
    log = _leader_log(OffsetAndEpoch(151, 1), OffsetAndEpoch(236, 3))
    assert log.snapshot_at_start() is None
