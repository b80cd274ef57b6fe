"""Followers and observers: pulling from the leader, truncating on divergence, catching up."""

from __future__ import annotations

from collections.abc import Iterable

from kraft_spark.raft.base import CoreState, InFlight
from kraft_spark.raft.events import (
    DiskLossCaughtUp,
    ForeignCluster,
    LeaderUnreachable,
    LogTruncated,
)
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.messages import ErrorCode, FetchRequest, FetchResponse
from kraft_spark.raft.records import Batch
from kraft_spark.raft.replication import truncation_offset
from kraft_spark.raft.state import Role
from kraft_spark.raft.vote_rules import leader_gone_delay_ms

# A voter refused our Fetch as coming from another cluster (INCONSISTENT_CLUSTER_ID): retry
# this much later, and say why at most once per FOREIGN_CLUSTER_NOTE_MS.
FOREIGN_CLUSTER_BACKOFF_MS = 1000
FOREIGN_CLUSTER_NOTE_MS = 10_000


class FollowerMixin(CoreState):
    # ------------------------------------------------------------------ safety rules (hooks)

    def _rule_fetch_waits_for_flush(self) -> bool:
        """The fsync rule: a Fetch reports the end offset only once the log is fsync'd to it."""
        return True

    def _rule_apply_diverging(self, diverging: OffsetAndEpoch) -> None:
        """Truncate everything at or after the divergence point (docs/concepts/protocol.md)."""
        offset = truncation_offset(self.log, diverging)
        if offset < self.log.end_offset():
            self.log.truncate_to(offset)
            self.producers.on_truncate(offset)
            self.truncated_to = offset
            self.events.append(LogTruncated(offset, diverging.epoch))
            if self.history.truncate(offset):
                self.voters_changed()

    # ------------------------------------------------------------------ fetching

    def _fetch_target(self) -> int | None:
        if self.role is Role.FOLLOWER:
            return self.leader_id
        candidates = [v for v in self.voters if v != self.node_id]
        if not candidates:
            return None
        return candidates[self.fetch_target_index % len(candidates)]

    def _maybe_send_fetch(self) -> None:
        """Send the next Fetch if we pull, none is outstanding, and the log is durable."""
        if self.role is not Role.FOLLOWER and not (
            self.role is Role.UNATTACHED and not self.may_vote
        ):
            return
        if self.fetch_in_flight is not None or self.now < self.next_fetch_at:
            return
        if self.log.flushed_offset() < self.log.end_offset() and self._rule_fetch_waits_for_flush():
            self.awaiting_flush = True
            self.request_flush()
            return
        self.awaiting_flush = False
        self._maybe_finish_catch_up()
        target = self._fetch_target()
        if target is None:
            return
        request = FetchRequest(
            cluster_id=self.cluster_id,
            replica_id=self.node_id,
            current_leader_epoch=self.epoch,
            fetch_offset=self.log.end_offset(),
            last_fetched_epoch=self.log.last_epoch(),
            max_wait_ms=self.config.fetch_max_wait_ms,
            max_bytes=self.config.fetch_max_bytes,
            catching_up=self.pending_catch_up,
            directory_id=self.directory_id,
        )
        timeout = self.config.fetch_max_wait_ms + self.config.request_timeout_ms // 2
        self.fetch_in_flight = self.send(target, "fetch", request, timeout)

    def _maybe_finish_catch_up(self) -> None:
        """The disk-loss rule: a voter that lost its disk votes again only once it holds what a
        leader committed *without it*: our Fetches do not count toward the high watermark while we
        catch up, so a high watermark that moved past the start of the leader's epoch while we
        watched was put there by a majority of the other voters (a zombie leader cannot)."""
        following = self.following  # None unless Follower
        if following is None:
            return
        hw, first = following.hw_seen, following.first_hw
        if (
            self.pending_catch_up
            and hw is not None
            and first is not None
            and hw > first
            and hw > self.log.end_offset_for_epoch(self.epoch - 1).offset
            and self.log.end_offset() >= hw
        ):
            self.pending_catch_up = False
            self._persist_needed = True
            self.events.append(DiskLossCaughtUp())

    def maybe_hasten_election(self, refused: InFlight) -> None:
        """Our Fetch ``refused`` could not even connect: the leader's host answered that nothing
        listens on its port, so the leader process is gone (a crash or kill -9; a slow, paused
        or partitioned leader never causes a refusal, only timeouts, which do not count).

        **Deviation from KIP-595** (docs/concepts/protocol.md), which waits
        ``fetch.timeout.ms`` without a successful Fetch: a voter following that leader in that
        epoch moves its fetch deadline up to now + a random delay in
        [0, election.timeout.ms / 2] (drawn from the injected RNG once per leader, so the
        followers that all noticed at once rarely campaign together).
        Safety never depends on timers, only liveness does: the vote rules still decide who
        leads. Ignored unless we are a voting Follower of ``refused.dest`` in the epoch the
        Fetch was sent in, and when the deadline is already sooner."""
        following = self.following  # None unless Follower
        if (
            following is None
            or not self.may_vote
            or refused.kind not in ("fetch", "fetch_snapshot")
            or refused.dest != self.leader_id
            or refused.epoch != self.epoch
            or following.refused
        ):
            return
        following.refused = True
        delay = leader_gone_delay_ms(self.rng, self.config.election_timeout_ms)
        if self.now + delay < following.fetch_deadline:
            following.fetch_deadline = self.now + delay
            self.events.append(LeaderUnreachable(self.leader_id, delay))

    def _poll_follower(self) -> None:
        if self.now >= self.followed.fetch_deadline:
            if self.may_vote:
                self.become_prospective()
            else:
                self.become_unattached(self.epoch)
            return
        self._maybe_send_fetch()

    # ------------------------------------------------------------------ Fetch responses

    def handle_fetch_response(
        self, request_id: int, pending: InFlight, resp: FetchResponse
    ) -> None:
        if request_id != self.fetch_in_flight:
            return  # an answer to a fetch we abandoned
        self.fetch_in_flight = None
        if resp.error == ErrorCode.INCONSISTENT_CLUSTER_ID:
            # Another cluster's answer: its epoch and leader mean nothing here.
            self._refused_as_foreign(pending.dest)
            self.next_fetch_at = self.now + FOREIGN_CLUSTER_BACKOFF_MS
            return
        if self.observe_epoch(resp.leader_epoch, resp.leader_id):
            return
        if resp.error != ErrorCode.NONE or self.role is not Role.FOLLOWER:
            self.next_fetch_at = self.now + self.config.retry_backoff_ms
            if not self.may_vote:
                # Observers (and catching-up voters) look elsewhere for the leader.
                if self.role is Role.FOLLOWER:
                    self.become_unattached(self.epoch)
                else:
                    self._arm_unattached_timer()
            return
        following = self.followed
        self.push_fetch_deadline()
        following.refused = False
        following.fetched = True
        self.maybe_update_own_endpoints()  # a fetching follower's poll timer rarely fires
        if resp.snapshot_id is not None:
            self.begin_snapshot_fetch(pending.dest, resp.snapshot_id)
            return
        if resp.diverging_epoch is not None:
            self._rule_apply_diverging(resp.diverging_epoch)
        else:
            self._append_fetched(resp.batches)
            following.hw_seen = resp.high_watermark
            if following.first_hw is None:
                following.first_hw = resp.high_watermark
            new_hw = min(resp.high_watermark, self.log.end_offset())
            if new_hw > self.high_watermark:
                self.high_watermark = new_hw
                self.hw_changed_to = new_hw
                if self.history.dynamic:
                    self.voters_changed()  # a no-op unless a rule hook reads the commit
        # An observer paces its Fetches (QuorumConfig.observer_fetch_interval_ms); a voter,
        # also one catching up after a disk loss, fetches again at once.
        pace = 0 if self.is_voter else self.config.observer_fetch_interval_ms
        self.next_fetch_at = self.now + pace
        self._maybe_send_fetch()

    def _refused_as_foreign(self, dest: int) -> None:
        """A voter answered our Fetch with INCONSISTENT_CLUSTER_ID: this node's directory was
        formatted for another cluster, and no retry can succeed. Say so (once per
        FOREIGN_CLUSTER_NOTE_MS, not on every retry) and retry slowly."""
        if self.now - self.foreign_cluster_noted_at < FOREIGN_CLUSTER_NOTE_MS:
            return
        self.foreign_cluster_noted_at = self.now
        self.events.append(ForeignCluster(dest, self.cluster_id))

    def _append_fetched(self, batches: Iterable[Batch]) -> None:
        appended = voters_moved = False
        for batch in batches:
            end = self.log.end_offset()
            if batch.last_offset < end:
                continue  # already held (the fetch was validated against our end offset)
            if batch.base_offset != end or batch.epoch < self.log.last_epoch():
                break  # not contiguous: drop the rest and fetch again
            self.log.append(batch)
            self.producers.on_append(batch)
            if batch.is_control and self.history.on_batch(batch):
                voters_moved = True
            appended = True
        if appended:
            self.request_flush()
        if voters_moved:
            self.voters_changed()
