"""Snapshots and retention in the simulator (KIP-630): the real snapshot store, state machine
and retention step of every node, on each node's own simulated disk.

Per node: a ``FileSnapshotStore`` on a ``SimulatedFileSystem`` (so crashes lose what was not
fsync'd and leave ``.part`` files behind), and the ``KeyValueState`` the node applies committed
records to. After every high-watermark move the node applies, takes a snapshot (at its applied
offset, which is committed) once enough bytes were applied and the seed's dice say so (now and
then the write is cut short, leaving a torn ``.part`` behind), and may
apply retention: the log start moves to the newest snapshot and older snapshots go. A node whose
fetch offset falls below its leader's log start must fetch a snapshot (FetchSnapshot), which
the simulator's faults (crashes, disk loss, partitions) interrupt at any point.

Invariant *state-equals-replay*: a node's state (its snapshot plus the log it applied after it)
equals the replay of the committed log up to its applied offset; checked whenever a node takes,
installs or loads a snapshot. *snapshot-committed*: no snapshot ends past the committed log.

Shell bugs the checker must catch (``--inject-bug``): ``snapshot-past-hw`` snapshots the log up
to its end, committed or not; ``retention-past-snapshot`` deletes the log past the newest
snapshot.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kraft_spark.log.simfs import SimulatedFileSystem
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.sim.invariants import Checker, InvariantViolation
from kraft_spark.sim.memlog import MemoryLog
from kraft_spark.sim.replay import CommittedReplay
from kraft_spark.state.machine import KeyValueState
from kraft_spark.state.snapshot_file import encode_snapshot
from kraft_spark.state.snapshot_store import FileSnapshotStore

SNAP_DIR = "/snapshots"
SNAPSHOT_EVERY_BYTES = 300  # tiny, so runs take many snapshots
SNAPSHOT_CHANCE = 0.5
RETENTION_CHANCE = 0.7
TORN_PART_CHANCE = 0.05
SHELL_BUGS = ("snapshot-past-hw", "retention-past-snapshot")


def _fresh_store() -> FileSnapshotStore:
    fs = SimulatedFileSystem()
    fs.makedirs(SNAP_DIR)
    fs.fsync_dir("/")
    return FileSnapshotStore(fs, SNAP_DIR)


@dataclass
class NodeSnapshots:
    store: FileSnapshotStore = field(default_factory=_fresh_store)
    state: KeyValueState = field(default_factory=KeyValueState)
    bytes_since: int = 0


@dataclass
class SnapshotStats:
    taken: int = 0
    installed: int = 0
    starts_advanced: int = 0
    torn_parts: int = 0


class SimSnapshots:
    def __init__(self, rng: random.Random, checker: Checker, bug: str | None = None) -> None:
        self.rng = rng
        self.checker = checker
        self.bug = bug
        self.nodes: dict[int, NodeSnapshots] = {}
        self.stats = SnapshotStats()
        self.replay = CommittedReplay(checker.committed)

    def of(self, node_id: int) -> NodeSnapshots:
        ns = self.nodes.get(node_id)
        if ns is None:
            ns = self.nodes[node_id] = NodeSnapshots()
        return ns

    # ------------------------------------------------------------------ life cycle

    def on_crash(self, node_id: int, *, torn: bool, wipe: bool) -> None:
        if wipe:
            self.nodes[node_id] = NodeSnapshots()
            return
        ns = self.of(node_id)
        fs = ns.store.fs
        assert isinstance(fs, SimulatedFileSystem)
        fs.crash(self.rng, torn)
        ns.store = FileSnapshotStore(fs, SNAP_DIR)  # rescans; removes unfinished .part files

    def on_start(self, node_id: int, log: MemoryLog) -> FileSnapshotStore:
        """Load the newest snapshot into the state; restart the log at it if it ends past
        the log (as the real node's start-up does). Returns the store for the core."""
        ns = self.of(node_id)
        ns.state = KeyValueState()
        ns.bytes_since = 0
        latest = ns.store.latest_id()
        if latest is not None:
            content = ns.store.load(latest)
            ns.state.load(content.entries, latest.offset, latest.epoch, content.producers,
                          content.voters, failed_txns=content.failed_txns,
                          leases=content.leases, outcomes_from=content.outcomes_from)
            if latest.offset > log.end_offset():
                log.truncate_fully_to(latest.offset, latest.epoch)
            self.check_state(node_id)
        if log.start_offset() > ns.state.applied_offset:
            raise InvariantViolation(
                "state-equals-replay",
                f"node {node_id}'s log starts at {log.start_offset()} but its newest snapshot "
                f"ends at {ns.state.applied_offset}: records between are lost",
            )
        return ns.store

    # ------------------------------------------------------------------ events

    def on_installed(self, node_id: int, snapshot_id: OffsetAndEpoch, log: MemoryLog) -> None:
        log.set_start_epoch(snapshot_id.epoch)
        ns = self.of(node_id)
        ns.store.delete_before(snapshot_id)  # as StateKeeper does: the log starts here now
        content = ns.store.load(snapshot_id)
        ns.state.load(content.entries, snapshot_id.offset, snapshot_id.epoch,
                      content.producers, content.voters, failed_txns=content.failed_txns,
                      leases=content.leases, outcomes_from=content.outcomes_from)
        ns.bytes_since = 0
        self.stats.installed += 1
        self.check_state(node_id)

    def on_high_watermark(self, node_id: int, hw: int, log: MemoryLog) -> None:
        ns = self.of(node_id)
        state = ns.state
        while state.applied_offset < hw:
            batches = log.read(max(state.applied_offset, log.start_offset()), 1 << 20)
            moved = False
            for batch in batches:
                if batch.next_offset <= state.applied_offset:
                    continue
                if batch.base_offset >= hw:
                    break
                try:
                    state.apply(batch)
                except ValueError as exc:
                    # The state machine refuses a batch that does not continue it: the node's
                    # state (from a snapshot it took or installed) and its log have diverged.
                    raise InvariantViolation(
                        "state-equals-replay",
                        f"node {node_id}: the committed log does not continue the state ({exc})",
                    ) from None
                ns.bytes_since += batch.size_estimate()
                moved = True
            if not moved:
                break
        if ns.bytes_since >= SNAPSHOT_EVERY_BYTES and self.rng.random() < SNAPSHOT_CHANCE:
            self._take(node_id, ns, log)
        if ns.store.latest_id() is not None and self.rng.random() < RETENTION_CHANCE:
            self._retention(ns, log)

    def _take(self, node_id: int, ns: NodeSnapshots, log: MemoryLog) -> None:
        state = ns.state
        if self.bug == "snapshot-past-hw":
            # Broken: snapshot everything the log holds, committed or not.
            shadow = KeyValueState(state.applied_offset, state.applied_epoch)
            shadow.load(state.items(), state.applied_offset, state.applied_epoch,
                        state.producers.export(), failed_txns=state.failed_txns,
                        leases=state.leases.export(), outcomes_from=state.outcomes_from)
            for batch in log.read(state.applied_offset, 1 << 30):
                if batch.base_offset >= shadow.applied_offset:
                    shadow.apply(batch)
            state = shadow
        sid = OffsetAndEpoch(state.applied_offset, state.applied_epoch)
        if sid.offset == 0 or sid in ns.store.ids():
            return
        if sid.offset > self.checker.committed_end:
            raise InvariantViolation(
                "snapshot-committed",
                f"node {node_id} took snapshot {sid.offset}-{sid.epoch} past the committed log "
                f"({self.checker.committed_end})",
            )
        if self.rng.random() < TORN_PART_CHANCE:
            # A writer cut short (the process died mid-write): a torn, unsynced .part that a
            # crash may keep or lose; the store must never take it for a snapshot, and removes
            # it when it opens.
            outcomes_from, failed, leases = state.outcomes_to_store()
            data = b"".join(encode_snapshot(sid, state.items(), state.producers.export(), 0,
                                           state.voters, failed_txns=failed, leases=leases,
                                           outcomes_from=outcomes_from))
            ns.store.fs.write_file(ns.store.path_of(sid) + ".part",
                                   data[: self.rng.randrange(len(data))])
            self.stats.torn_parts += 1
            return
        outcomes_from, failed, leases = state.outcomes_to_store()
        ns.store.write(sid, state.items(), state.producers.export(), 0, voters=state.voters,
                       failed_txns=failed, leases=leases, outcomes_from=outcomes_from)
        ns.store.add(sid)
        ns.bytes_since = 0
        self.stats.taken += 1
        self.check_state(node_id)

    def _retention(self, ns: NodeSnapshots, log: MemoryLog) -> None:
        newest = ns.store.latest_id()
        assert newest is not None
        target = newest.offset
        if self.bug == "retention-past-snapshot":
            target = min(log.end_offset(), newest.offset + self.rng.randint(1, 20))
        if target <= log.start_offset() or target > log.end_offset():
            return
        log.advance_start_offset(target, newest.epoch)
        ns.store.delete_before(newest)
        self.stats.starts_advanced += 1

    # ------------------------------------------------------------------ invariant

    def check_state(self, node_id: int) -> None:
        state = self.of(node_id).state
        upto = state.applied_offset
        if upto > self.checker.committed_end:
            raise InvariantViolation(
                "state-equals-replay",
                f"node {node_id} applied up to {upto}, past the committed log "
                f"({self.checker.committed_end})",
            )
        replay = self.replay.state_at(upto)
        # Values, revisions (create offset, version) and the outcomes of conditional writes.
        if (replay.applied_offset != upto or dict(replay.items()) != dict(state.items())
                or replay.txns_in_window() != state.txns_in_window()
                or replay.leases_export() != state.leases_export()):
            diff: set[object] = (set(replay.items()) ^ set(state.items())) or (
                set(replay.txns_in_window().items()) ^ set(state.txns_in_window().items()))
            raise InvariantViolation(
                "state-equals-replay",
                f"node {node_id}'s state at offset {upto} differs from the replay of the "
                f"committed log ({len(diff)} differing entries, e.g. "
                f"{sorted(map(repr, diff))[:2]})",
            )
