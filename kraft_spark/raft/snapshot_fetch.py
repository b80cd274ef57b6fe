"""KIP-630 in the core: the leader serves FetchSnapshot; a follower or observer whose fetch
offset is below the leader's log start downloads the leader's snapshot and installs it.

Follower side, in order:

1. a Fetch answer carries ``snapshot_id``: start (or resume) a download of that snapshot;
2. FetchSnapshot requests, one at a time (they use the fetch slot, ``fetch_in_flight``), each
   for the bytes after what arrived; every good answer counts as contact with the leader
   (it resets the fetch timeout, as a Fetch answer does);
3. when ``position + len(data) == size``: ``download.complete()`` checks the whole file and
   installs it atomically; the log is then replaced by an empty one starting at the snapshot's
   end offset, the producer table is loaded from the snapshot, the high watermark moves to the
   snapshot's end (it is committed), and ``Ready.snapshot_installed`` tells the shell to load
   its state machine from it. Fetching resumes at the snapshot's end offset.

A download that fails its checks, an error answer or a new leader aborts the download; the
node then fetches again and is told afresh which snapshot to get. Nothing acknowledged is lost:
a snapshot only ever covers committed records, and the old log stays until one is installed.
"""

from __future__ import annotations

from kraft_spark.raft.base import CoreState, InFlight
from kraft_spark.raft.events import SnapshotEvent, SnapshotStep
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.messages import (
    ErrorCode,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from kraft_spark.raft.snapshot_api import InvalidSnapshotError
from kraft_spark.raft.state import Role


class SnapshotTransfer:
    """Both ends of a snapshot's transfer: the leader's FetchSnapshot answers and a
    follower's or observer's download."""

    def __init__(self, core: CoreState) -> None:
        self.core = core

    # ------------------------------------------------------------------ leader side

    def _fetch_snapshot_error(self, error: ErrorCode) -> FetchSnapshotResponse:
        return FetchSnapshotResponse(error, self.core.known_leader(), self.core.epoch)

    def serve_chunk(self, token: object, req: FetchSnapshotRequest) -> None:
        core = self.core
        if req.cluster_id != core.cluster_id:
            core.reply(token, self._fetch_snapshot_error(ErrorCode.INCONSISTENT_CLUSTER_ID))
            return
        if req.current_leader_epoch < core.epoch:
            core.reply(token, self._fetch_snapshot_error(ErrorCode.FENCED_LEADER_EPOCH))
            return
        if req.current_leader_epoch > core.epoch:
            core.reply(token, self._fetch_snapshot_error(ErrorCode.UNKNOWN_LEADER_EPOCH))
            return
        if core.role is not Role.LEADER:
            core.reply(token, self._fetch_snapshot_error(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            return
        size = core.snapshots.size(req.snapshot_id)
        if size is None:
            core.reply(token, self._fetch_snapshot_error(ErrorCode.SNAPSHOT_NOT_FOUND))
            return
        if req.position < 0 or req.position >= size:
            core.reply(token, self._fetch_snapshot_error(ErrorCode.POSITION_OUT_OF_RANGE))
            return
        budget = max(1, min(req.max_bytes, core.config.snapshot_chunk_bytes))
        data = core.snapshots.read_chunk(req.snapshot_id, req.position, budget)
        # A voter downloading a snapshot is alive: it counts for check-quorum (as in Kafka).
        ls = core.leader_state
        if ls is not None:
            ls.progress.on_contact(req.replica_id, core.now)
        core.reply(
            token,
            FetchSnapshotResponse(
                ErrorCode.NONE, core.node_id, core.epoch, req.snapshot_id, size, req.position,
                data,
            ),
        )

    # ------------------------------------------------------------------ follower side

    def begin_download(self, leader: int, snapshot_id: OffsetAndEpoch) -> None:
        """The leader's log starts after our fetch offset: download ``snapshot_id``."""
        core = self.core
        download = core.download
        if download is None or download.snapshot_id != snapshot_id:
            if download is not None:
                download.abort()
            try:
                core.download = core.snapshots.begin_download(snapshot_id)
            except (InvalidSnapshotError, OSError) as exc:
                core.events.append(SnapshotEvent(SnapshotStep.UNAVAILABLE, str(snapshot_id),
                                                 str(exc)))
                core.next_fetch_at = core.now + core.config.retry_backoff_ms
                return
            core.events.append(SnapshotEvent(
                SnapshotStep.FETCHING, f"{snapshot_id.offset}-{snapshot_id.epoch}",
                f"from node {leader} (our log ends at {core.log.end_offset()})"))
        self._send_fetch_snapshot(leader)

    def _send_fetch_snapshot(self, leader: int) -> None:
        core = self.core
        download = core.download
        assert download is not None
        request = FetchSnapshotRequest(
            cluster_id=core.cluster_id,
            replica_id=core.node_id,
            current_leader_epoch=core.epoch,
            snapshot_id=download.snapshot_id,
            position=download.position(),
            max_bytes=core.config.snapshot_chunk_bytes,
        )
        core.fetch_in_flight = core.send(
            leader, "fetch_snapshot", request, core.config.request_timeout_ms
        )

    def abort_download(self, why: str) -> None:
        core = self.core
        if core.download is not None:
            core.events.append(SnapshotEvent(SnapshotStep.ABORTED, detail=why))
            core.download.abort()
            core.download = None

    def handle_chunk(
        self, request_id: int, pending: InFlight, resp: FetchSnapshotResponse
    ) -> None:
        core = self.core
        if request_id != core.fetch_in_flight:
            return
        core.fetch_in_flight = None
        if core.observe_epoch(resp.leader_epoch, resp.leader_id):
            self.abort_download("a new leader")
            return
        download = core.download
        if (
            resp.error != ErrorCode.NONE
            or download is None
            or resp.snapshot_id != download.snapshot_id
            or resp.position != download.position()
            or not resp.data
        ):
            self.abort_download(f"the leader answered {resp.error.name}")
            core.next_fetch_at = core.now + core.config.retry_backoff_ms
            return
        core.push_fetch_deadline()
        try:
            download.write(resp.position, resp.data)
            done = download.position() >= resp.size
            if done:
                download.complete()
        except (InvalidSnapshotError, OSError) as exc:
            core.download = None
            download.abort()
            core.events.append(SnapshotEvent(SnapshotStep.REFUSED, str(download.snapshot_id),
                                             str(exc)))
            core.next_fetch_at = core.now + core.config.retry_backoff_ms
            return
        if not done:
            self._send_fetch_snapshot(pending.dest)
            return
        core.download = None
        self._install_snapshot(download.snapshot_id)
        core.next_fetch_at = core.now
        core.maybe_send_fetch()

    def _install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """The downloaded snapshot is durable in the store: the log restarts after it."""
        core = self.core
        core.log.truncate_fully_to(snapshot_id.offset)
        try:
            core.producers.load(core.snapshots.producer_state())
        except ValueError:
            core.producers.load(b"")
        core.history.reset(core.snapshot_voters())
        core.voters_changed()
        core.truncated_to = snapshot_id.offset
        core.snapshot_installed = snapshot_id
        if snapshot_id.offset > core.high_watermark:
            core.high_watermark = snapshot_id.offset
            core.hw_changed_to = snapshot_id.offset
        core.events.append(SnapshotEvent(SnapshotStep.INSTALLED,
                                         f"{snapshot_id.offset}-{snapshot_id.epoch}",
                                         str(snapshot_id.offset)))
