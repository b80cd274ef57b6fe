"""``StateKeeper``: a node's state machine, its snapshots and its retention (KIP-630).

On the node's event loop, in commit order:

* ``on_high_watermark``: apply the newly committed batches to the ``KeyValueState``; when a
  snapshot is due (``kraft_spark.state.policy``), copy the state (one dict copy on the loop,
  about 30 ms per million keys) and write the file on the keeper's own thread, so the loop keeps
  serving; when the write is done, add it to the store and apply retention;
* ``on_snapshot_installed``: the core installed a snapshot from the leader: load it.

Start-up (``open_storage``, off the loop): open the log and the store, load the newest snapshot
that checks out (a damaged one is set aside as ``.corrupt``, named in the log, and the next
older one is tried), and if it ends past the log's end (a crash between installing a snapshot
and restarting the log), restart the log at it. If the log starts past every valid snapshot the
node cannot rebuild its state from its own disk: the log is emptied and the node reports
``lost_history`` (it then catches up from the leader like a voter whose disk was lost).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kraft_spark.log.fs import RealFileSystem
from kraft_spark.log.segmented_log import SegmentedLog
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch
from kraft_spark.raft.snapshot_api import InvalidSnapshotError
from kraft_spark.state.machine import KeyValueState
from kraft_spark.state.policy import SnapshotConfig, retention_decision, snapshot_due
from kraft_spark.state.snapshot_file import label
from kraft_spark.state.snapshot_store import FileSnapshotStore

log = logging.getLogger(__name__)
APPLY_READ_BYTES = 4 * 1024 * 1024


@dataclass
class Storage:
    log: SegmentedLog
    store: FileSnapshotStore
    state: KeyValueState
    lost_history: bool


def open_storage(
    log_dir: str, config: SnapshotConfig, *, node_id: int, lock_timeout_s: float,
    preallocate: bool,
) -> Storage:
    """Blocking: open the log and the snapshots and load the state (see the module doc)."""
    fs = RealFileSystem()
    the_log = SegmentedLog.open(
        fs, log_dir, node_id=node_id, lock_timeout_s=lock_timeout_s, preallocate=preallocate,
        segment_bytes=config.segment_bytes,
    )
    try:
        store = FileSnapshotStore(fs, the_log.partition_dir)
        state = KeyValueState()
        loaded: OffsetAndEpoch | None = None
        for sid in reversed(store.ids()):
            try:
                content = store.load(sid)
                state.load(content.entries, sid.offset, sid.epoch, content.producers,
                           content.voters, failed_txns=content.failed_txns,
                           leases=content.leases, outcomes_from=content.outcomes_from)
            except (InvalidSnapshotError, ValueError) as exc:
                log.error("node %d: snapshot %s refused: %s", node_id, label(sid), exc)
                continue
            loaded = sid
            break
        lost = False
        if loaded is not None and loaded.offset > the_log.end_offset():
            log.warning("node %d: snapshot %s ends past the log end %d: restarting the log at it",
                        node_id, label(loaded), the_log.end_offset())
            the_log.truncate_fully_to(loaded.offset)
        elif the_log.start_offset() > (loaded.offset if loaded else 0):
            log.error(
                "node %d: the log starts at %d but no valid snapshot reaches it: the state "
                "cannot be rebuilt from this disk; emptying the log and catching up from the "
                "leader", node_id, the_log.start_offset())
            lost = True
            the_log.truncate_fully_to(the_log.start_offset())
            for sid in store.ids():
                store.delete(sid)
            state = KeyValueState(the_log.start_offset())
        if loaded is not None:
            log.info("node %d: loaded snapshot %s (%d keys); replaying the log after it",
                     node_id, label(loaded), len(state))
    except BaseException:
        the_log.close()
        raise
    return Storage(the_log, store, state, lost)


def _yield_gil() -> None:
    time.sleep(0)


class StateKeeper:
    def __init__(
        self,
        storage: Storage,
        config: SnapshotConfig,
        *,
        node_id: int,
        now_ms: Callable[[], int],
        observer_hold: Callable[[], int | None],
    ) -> None:
        self.log = storage.log
        self.store = storage.store
        self.state = storage.state
        self.config = config
        self.node_id = node_id
        self._now_ms = now_ms
        self._observer_hold = observer_hold
        # A hold of this node's own (the driver's observer: what Delta has not materialized).
        self.local_hold: Callable[[], int | None] | None = None
        # The state keeps the outcomes of conditional writes that hold has not materialized
        # (past the outcome window, down to the log start: kraft_spark.state.outcomes).
        self.state.outcome_hold = self._outcome_hold
        self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"node-{node_id}-snapshot")
        self._writer_fs = RealFileSystem()  # the writer thread's own file handles
        self._writing: asyncio.Future[None] | None = None
        self._bytes_since = 0
        self._last_snapshot_ms = now_ms()
        latest = self.store.latest_id()
        self._last_snapshot_offset = latest.offset if latest else 0
        # The newest snapshot's size, written here or found at start or installed: the next is
        # due only after kraft.snapshot.log.ratio times as many bytes of records (policy.py).
        self._newest_snapshot_bytes = (self.store.size(latest) or 0) if latest else 0
        self.snapshots_generated = 0
        self.last_snapshot_bytes = 0
        self.retention_passed_observer = 0
        self.failed: BaseException | None = None
        # Told each batch right after the state applied it (the store's watches), and each
        # snapshot the state was replaced by (the history between is not applied one by one).
        self.apply_listeners: list[Callable[[Batch], None]] = []
        self.load_listeners: list[Callable[[OffsetAndEpoch], None]] = []

    # ------------------------------------------------------------------ applying

    def on_high_watermark(self, high_watermark: int) -> None:
        state = self.state
        while state.applied_offset < high_watermark:
            start = max(state.applied_offset, self.log.start_offset())
            batches = self.log.read(start, APPLY_READ_BYTES)
            if not batches:
                break
            for batch in batches:
                if batch.next_offset <= state.applied_offset:
                    continue
                if batch.base_offset >= high_watermark:
                    break
                state.apply(batch)
                self._bytes_since += batch.size_estimate()
                for listener in self.apply_listeners:
                    listener(batch)
            else:
                continue
            break
        self.maybe_snapshot()

    def on_snapshot_installed(self, snapshot_id: OffsetAndEpoch) -> None:
        content = self.store.load(snapshot_id)
        # The log starts at the installed snapshot now: older snapshots describe nothing the
        # log still holds (Kafka's truncateToLatestSnapshot forgets them too).
        self.store.delete_before(snapshot_id)
        self.state.load(content.entries, snapshot_id.offset, snapshot_id.epoch, content.producers,
                        content.voters, failed_txns=content.failed_txns,
                        leases=content.leases, outcomes_from=content.outcomes_from)
        self._bytes_since = 0
        self._last_snapshot_offset = snapshot_id.offset
        self._last_snapshot_ms = self._now_ms()
        self._newest_snapshot_bytes = self.store.size(snapshot_id) or 0
        log.info("node %d: state loaded from the leader's snapshot %s (%d keys)",
                 self.node_id, label(snapshot_id), len(self.state))
        for listener in self.load_listeners:
            listener(snapshot_id)

    # ------------------------------------------------------------------ snapshots

    def maybe_snapshot(self, *, force: bool = False) -> bool:
        """Start writing a snapshot of the applied state if one is due and none is being
        written. Returns True if one was started."""
        if self._writing is not None or self.failed is not None:
            return False
        state = self.state
        applied_since = state.applied_offset > self._last_snapshot_offset
        due = (force and applied_since) or snapshot_due(
            self.config, bytes_since=self._bytes_since, applied_since=applied_since,
            ms_since=self._now_ms() - self._last_snapshot_ms,
            last_snapshot_bytes=self._newest_snapshot_bytes,
        )
        if not due:
            return False
        sid = OffsetAndEpoch(state.applied_offset, state.applied_epoch)
        entries = state.copy_entries()
        keys = len(entries)
        producers = state.producers.export()
        voters = state.voters
        outcomes_from, failed_txns, leases = state.outcomes_to_store()
        self._bytes_since = 0
        self._last_snapshot_offset = sid.offset
        self._last_snapshot_ms = self._now_ms()
        loop = asyncio.get_running_loop()
        started = time.perf_counter()

        def write() -> int:
            # sleep(0) between batches: the encoder would otherwise keep the GIL for up to
            # the interpreter's switch interval (5 ms) at a time, stalling the event loop.
            return self.store.write(sid, entries.items(), producers, self._now_ms(),
                                    voters=voters, failed_txns=failed_txns, leases=leases,
                                    outcomes_from=outcomes_from,
                                    fs=self._writer_fs,
                                    between_batches=_yield_gil)

        future = loop.run_in_executor(self._writer, write)
        self._writing = asyncio.ensure_future(self._finish(sid, keys, future, started))
        return True

    async def _finish(self, sid: OffsetAndEpoch, keys: int, future: asyncio.Future[int],
                      started: float) -> None:
        try:
            size = await future
        except Exception as exc:  # a full disk: keep serving, retry at the next due time
            log.error("node %d: writing snapshot %s failed: %s", self.node_id, label(sid), exc)
            self._writing = None
            return
        self.store.add(sid)
        self.snapshots_generated += 1
        self.last_snapshot_bytes = self._newest_snapshot_bytes = size
        log.info("node %d: wrote snapshot %s (%d keys, %d bytes) in %.0f ms", self.node_id,
                 label(sid), keys, size, (time.perf_counter() - started) * 1000)
        self._writing = None
        self.apply_retention()

    async def wait_idle(self) -> None:
        """Wait for the snapshot being written, if any (tests, shutdown)."""
        if self._writing is not None:
            await asyncio.shield(self._writing)

    # ------------------------------------------------------------------ retention

    def _outcome_hold(self) -> int | None:
        """Where the local materializer reads next, no lower than the log start (below it,
        the materializer bootstraps from a snapshot and needs no outcome): so the outcomes
        kept past the window are bounded by the records the log keeps."""
        hold = self.local_hold() if self.local_hold is not None else None
        return None if hold is None else max(hold, self.log.start_offset())

    def _hold(self) -> int | None:
        holds = [self._observer_hold(), self.local_hold() if self.local_hold else None]
        present = [h for h in holds if h is not None]
        return min(present) if present else None

    def apply_retention(self) -> None:
        decision = retention_decision(
            self.config,
            log_start=self.log.start_offset(),
            segments=self.log.segment_spans(),
            snapshots=self.store.ids(),
            snapshot_bytes=self.store.total_bytes(),
            now_ms=self._now_ms(),
            observer_hold=self._hold(),
        )
        if decision.new_start is None:
            return
        start = min(decision.new_start, self.state.applied_offset, self.log.end_offset())
        if decision.passed_hold:
            self.retention_passed_observer += 1
            log.warning(
                "node %d: retention moves the log start to %d past what the observers have "
                "fetched (%s): %s; a lagging observer will bootstrap from a snapshot",
                self.node_id, start, self._hold(), decision.reason)
        self.log.advance_start_offset(start)
        kept = [s for s in self.store.ids() if s.offset <= start]
        if kept:
            self.store.delete_before(kept[-1])
        log.info("node %d: retention (%s): log start offset %d", self.node_id, decision.reason,
                 start)

    def latest_snapshot_label(self) -> str | None:
        latest = self.store.latest_id()
        return label(latest) if latest is not None else None

    def close(self) -> None:
        self._writer.shutdown(wait=True)
