"""The voter set in force along the log (KIP-853's VoterSetHistory).

Invariant: the voter set in force is that of the newest VotersRecord in the node's log or in the
snapshot at its start, **committed or not** (a change counts from the moment it is appended, as
in Kafka); when a truncation removes that record, the previous one is in force again. With no
VotersRecord anywhere, the static set of ``controller.quorum.voters`` is in force (kraft.version
0). A snapshot covering offsets below ``o`` holds the set in force at ``o`` (``at``).
"""

from __future__ import annotations

from kraft_spark.raft.records import Batch
from kraft_spark.raft.voter_records import voters_in
from kraft_spark.raft.voter_set import VoterSet


class VoterHistory:
    def __init__(self, static: VoterSet) -> None:
        self.static = static
        # The set stored in the snapshot at the log start (None: that snapshot holds none).
        self.base: VoterSet | None = None
        # (offset of the VotersRecord, its set), in log order.
        self.entries: list[tuple[int, VoterSet]] = []

    @property
    def dynamic(self) -> bool:
        """True once a VotersRecord exists (kraft.version 1): changes are possible."""
        return self.base is not None or bool(self.entries)

    def latest(self) -> VoterSet:
        if self.entries:
            return self.entries[-1][1]
        return self.base if self.base is not None else self.static

    def latest_offset(self) -> int:
        """The offset of the newest VotersRecord in the log; -1 when it is below the log start
        (in the snapshot, hence committed) or there is none."""
        return self.entries[-1][0] if self.entries else -1

    def at(self, offset: int) -> VoterSet:
        """The set in force for a snapshot ending at ``offset`` (records below it)."""
        for record_offset, voters in reversed(self.entries):
            if record_offset < offset:
                return voters
        return self.base if self.base is not None else self.static

    def on_batch(self, batch: Batch) -> bool:
        """Feed every batch appended to the log, in order; True when the set changed."""
        voters = voters_in(batch)
        if voters is None:
            return False
        self.entries.append((batch.base_offset, voters))
        return True

    def truncate(self, offset: int) -> bool:
        """The log lost every record at or after ``offset``; True when the set in force
        changed (it reverted to an older one)."""
        before = self.latest()
        self.entries = [(o, v) for o, v in self.entries if o < offset]
        return self.latest() != before

    def reset(self, base: VoterSet | None) -> None:
        """The log restarted at a snapshot holding ``base`` (None: it holds no VotersRecord)."""
        self.base = base
        self.entries = []
