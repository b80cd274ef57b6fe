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


class SnapshotFetchMixin(CoreState):
    # ------------------------------------------------------------------ leader side

    def _fetch_snapshot_error(self, error: ErrorCode) -> FetchSnapshotResponse:
        return FetchSnapshotResponse(error, self.known_leader(), self.epoch)

    def handle_fetch_snapshot_request(self, token: object, req: FetchSnapshotRequest) -> None:
        if req.cluster_id != self.cluster_id:
            self.reply(token, self._fetch_snapshot_error(ErrorCode.INCONSISTENT_CLUSTER_ID))
            return
        if req.current_leader_epoch < self.epoch:
            self.reply(token, self._fetch_snapshot_error(ErrorCode.FENCED_LEADER_EPOCH))
            return
        if req.current_leader_epoch > self.epoch:
            self.reply(token, self._fetch_snapshot_error(ErrorCode.UNKNOWN_LEADER_EPOCH))
            return
        if self.role is not Role.LEADER:
            self.reply(token, self._fetch_snapshot_error(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            return
        size = self.snapshots.size(req.snapshot_id)
        if size is None:
            self.reply(token, self._fetch_snapshot_error(ErrorCode.SNAPSHOT_NOT_FOUND))
            return
        if req.position < 0 or req.position >= size:
            self.reply(token, self._fetch_snapshot_error(ErrorCode.POSITION_OUT_OF_RANGE))
            return
        budget = max(1, min(req.max_bytes, self.config.snapshot_chunk_bytes))
        data = self.snapshots.read_chunk(req.snapshot_id, req.position, budget)
        # A voter downloading a snapshot is alive: it counts for check-quorum (as in Kafka).
        self.on_replica_contact(req.replica_id)
        self.reply(
            token,
            FetchSnapshotResponse(
                ErrorCode.NONE, self.node_id, self.epoch, req.snapshot_id, size, req.position,
                data,
            ),
        )

    # ------------------------------------------------------------------ follower side

    def begin_snapshot_fetch(self, leader: int, snapshot_id: OffsetAndEpoch) -> None:
        """The leader's log starts after our fetch offset: download ``snapshot_id``."""
        download = self.download
        if download is None or download.snapshot_id != snapshot_id:
            if download is not None:
                download.abort()
            try:
                self.download = self.snapshots.begin_download(snapshot_id)
            except (InvalidSnapshotError, OSError) as exc:
                self.events.append(SnapshotEvent(SnapshotStep.UNAVAILABLE, str(snapshot_id),
                                                 str(exc)))
                self.next_fetch_at = self.now + self.config.retry_backoff_ms
                return
            self.events.append(SnapshotEvent(
                SnapshotStep.FETCHING, f"{snapshot_id.offset}-{snapshot_id.epoch}",
                f"from node {leader} (our log ends at {self.log.end_offset()})"))
        self._send_fetch_snapshot(leader)

    def _send_fetch_snapshot(self, leader: int) -> None:
        download = self.download
        assert download is not None
        request = FetchSnapshotRequest(
            cluster_id=self.cluster_id,
            replica_id=self.node_id,
            current_leader_epoch=self.epoch,
            snapshot_id=download.snapshot_id,
            position=download.position(),
            max_bytes=self.config.snapshot_chunk_bytes,
        )
        self.fetch_in_flight = self.send(
            leader, "fetch_snapshot", request, self.config.request_timeout_ms
        )

    def abort_snapshot_fetch(self, why: str) -> None:
        if self.download is not None:
            self.events.append(SnapshotEvent(SnapshotStep.ABORTED, detail=why))
            self.download.abort()
            self.download = None

    def handle_fetch_snapshot_response(
        self, request_id: int, pending: InFlight, resp: FetchSnapshotResponse
    ) -> None:
        if request_id != self.fetch_in_flight:
            return
        self.fetch_in_flight = None
        if self.observe_epoch(resp.leader_epoch, resp.leader_id):
            self.abort_snapshot_fetch("a new leader")
            return
        download = self.download
        if (
            resp.error != ErrorCode.NONE
            or download is None
            or resp.snapshot_id != download.snapshot_id
            or resp.position != download.position()
            or not resp.data
        ):
            self.abort_snapshot_fetch(f"the leader answered {resp.error.name}")
            self.next_fetch_at = self.now + self.config.retry_backoff_ms
            return
        self.push_fetch_deadline()
        try:
            download.write(resp.position, resp.data)
            done = download.position() >= resp.size
            if done:
                download.complete()
        except (InvalidSnapshotError, OSError) as exc:
            self.download = None
            download.abort()
            self.events.append(SnapshotEvent(SnapshotStep.REFUSED, str(download.snapshot_id),
                                             str(exc)))
            self.next_fetch_at = self.now + self.config.retry_backoff_ms
            return
        if not done:
            self._send_fetch_snapshot(pending.dest)
            return
        self.download = None
        self._install_snapshot(download.snapshot_id)
        self.next_fetch_at = self.now
        self._maybe_send_fetch()

    def _install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """The downloaded snapshot is durable in the store: the log restarts after it."""
        self.log.truncate_fully_to(snapshot_id.offset)
        try:
            self.producers.load(self.snapshots.producer_state())
        except ValueError:
            self.producers.load(b"")
        self.history.reset(self.snapshot_voters())
        self.voters_changed()
        self.truncated_to = snapshot_id.offset
        self.snapshot_installed = snapshot_id
        if snapshot_id.offset > self.high_watermark:
            self.high_watermark = snapshot_id.offset
            self.hw_changed_to = snapshot_id.offset
        self.events.append(SnapshotEvent(SnapshotStep.INSTALLED,
                                         f"{snapshot_id.offset}-{snapshot_id.epoch}",
                                         str(snapshot_id.offset)))
