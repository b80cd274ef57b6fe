"""What a restore from the warehouse can rebuild, decided from the warehouse's own records
(pure: no Spark, no files), or why it must refuse.

Inputs: the materializer commits of ``records`` (each says it holds exactly the rows for Raft
offsets ``[first_offset, last_offset]``; a KIP-630 bootstrap commit jumped over its range with
no rows), the highest high watermark any table's commit recorded, and the Raft snapshots stored
in ``<warehouse>/_raft_snapshots``.

The restore starts from the newest stored snapshot at or after the last gap in ``records``
(none needed when ``records`` has no gap: the state is replayed from offset 0) and replays the
``records`` rows after it; the rebuilt log starts at ``end`` = the larger of the snapshot's end
and the records' end. It refuses, never guessing, when

* ``records`` has a gap (a bootstrap jump) and no stored snapshot reaches past it: the state
  before the gap is in no file;
* ``end`` is below the recorded high watermark: offsets ``end``..``hw - 1`` were committed (the
  quorum said so to the materializer) and neither table nor snapshot holds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kraft_spark.delta.tables import CommitMetadata
from kraft_spark.state.snapshot_file import SnapshotId, label


class RestoreRefused(RuntimeError):
    """The warehouse cannot prove it holds everything committed; names what is missing."""


@dataclass(frozen=True, slots=True)
class RestorePlan:
    snapshot: SnapshotId | None  # the stored snapshot to start from (None: the empty state)
    replay_from: int  # records rows with replay_from <= offset < end are applied on it
    end: int  # the rebuilt log starts here (its snapshot's end offset)
    recorded_high_watermark: int

    def describe(self) -> str:
        start = f"Raft snapshot {label(self.snapshot)}" if self.snapshot else "an empty state"
        if self.replay_from < self.end:
            return (f"{start} + records offsets {self.replay_from}..{self.end - 1} "
                    f"(log restarts at offset {self.end})")
        return f"{start} (log restarts at offset {self.end})"


def last_gap_end(commits: Sequence[CommitMetadata]) -> tuple[int, str]:
    """The offset after the last range ``records`` holds no rows for (0: none), and why."""
    covered, gap_end, why = 0, 0, ""
    for meta in sorted(commits, key=lambda m: (m.first_offset, m.last_offset)):
        if meta.first_offset > covered:
            gap_end = meta.first_offset
            why = f"no commit holds offsets {covered}..{meta.first_offset - 1}"
        if meta.bootstrap_snapshot is not None and meta.last_offset + 1 > gap_end:
            gap_end = meta.last_offset + 1
            why = (f"offsets {meta.first_offset}..{meta.last_offset} were skipped when the "
                   f"tables were bootstrapped from snapshot {meta.bootstrap_snapshot}")
        covered = max(covered, meta.last_offset + 1)
    return gap_end, why


def plan_restore(
    commits: Sequence[CommitMetadata],
    recorded_high_watermark: int,
    stored: Sequence[SnapshotId],
    where: str,
) -> RestorePlan | None:
    """The restore the warehouse supports; None when it holds nothing (a new warehouse).
    ``where`` names the snapshots' directory in errors. Raises RestoreRefused."""
    if not commits and not stored:
        return None
    records_end = max((m.last_offset + 1 for m in commits), default=0)
    gap_end, why = last_gap_end(commits)
    usable = sorted((s for s in stored if s.offset >= gap_end),
                    key=lambda s: (s.offset, s.epoch))
    snapshot = usable[-1] if usable else None
    if snapshot is None and gap_end > 0:
        raise RestoreRefused(
            f"cannot rebuild the quorum from the warehouse: records has no rows below offset "
            f"{gap_end} ({why}) and {where} holds no Raft snapshot at or after it "
            f"(it holds: {', '.join(map(label, stored)) or 'none'}). Restore a voter's disk, "
            "or a snapshot file into that directory")
    end = max(records_end, snapshot.offset if snapshot else 0)
    if end < recorded_high_watermark:
        raise RestoreRefused(
            f"cannot rebuild the quorum from the warehouse: its tables recorded high watermark "
            f"{recorded_high_watermark}, but records ends at offset {records_end} and the "
            f"newest stored snapshot at {snapshot.offset if snapshot else 0}: offsets {end}.."
            f"{recorded_high_watermark - 1} were committed and are in neither. Restore a "
            "voter's disk (its log holds them) and start again")
    replay_from = snapshot.offset if snapshot else 0
    return RestorePlan(snapshot, min(replay_from, end), end, recorded_high_watermark)
