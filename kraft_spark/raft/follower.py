"""Followers and observers: pulling from the leader, truncating on divergence, catching up."""

from __future__ import annotations

from collections.abc import Iterable

from kraft_spark.raft.base import CoreState, InFlight
from kraft_spark.raft.elections import Elections
from kraft_spark.raft.events import (
    ForeignCluster,
    LeaderUnreachable,
    LogTruncated,
)
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.messages import ErrorCode, FetchResponse
from kraft_spark.raft.records import Batch
from kraft_spark.raft.replication import truncation_offset
from kraft_spark.raft.snapshot_fetch import SnapshotTransfer
from kraft_spark.raft.state import Role
from kraft_spark.raft.vote_rules import leader_gone_delay_ms
from kraft_spark.raft.voter_update import OwnEndpoints

# A voter refused our Fetch as coming from another cluster (INCONSISTENT_CLUSTER_ID): retry
# this much later, and say why at most once per FOREIGN_CLUSTER_NOTE_MS.
FOREIGN_CLUSTER_BACKOFF_MS = 1000
FOREIGN_CLUSTER_NOTE_MS = 10_000


class Fetching:
    """What a follower does with its leader's answers, and an observer with any voter's:
    appending, truncating on divergence, snapshots to download, giving up on a leader. The
    loop that sends the Fetches is ``CoreState.maybe_send_fetch``."""

    def __init__(self, core: CoreState, elections: Elections, snapshot_transfer: SnapshotTransfer,
                 endpoints: OwnEndpoints) -> None:
        self.core = core
        self.elections = elections
        self.snapshot_transfer = snapshot_transfer
        self.endpoints = endpoints

    # ------------------------------------------------------------------ safety rules (hooks)

    def _rule_apply_diverging(self, diverging: OffsetAndEpoch) -> None:
        """Truncate everything at or after the divergence point (docs/concepts/protocol.md)."""
        core = self.core
        offset = truncation_offset(core.log, diverging)
        if offset < core.log.end_offset():
            core.log.truncate_to(offset)
            core.producers.on_truncate(offset)
            core.truncated_to = offset
            core.events.append(LogTruncated(offset, diverging.epoch))
            if core.history.truncate(offset):
                core.voters_changed()

    # ------------------------------------------------------------------ fetching

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
        core = self.core
        following = core.following  # None unless Follower
        if (
            following is None
            or not core.may_vote
            or refused.kind not in ("fetch", "fetch_snapshot")
            or refused.dest != core.leader_id
            or refused.epoch != core.epoch
            or following.refused
        ):
            return
        following.refused = True
        delay = leader_gone_delay_ms(core.rng, core.config.election_timeout_ms)
        if core.now + delay < following.fetch_deadline:
            following.fetch_deadline = core.now + delay
            core.events.append(LeaderUnreachable(core.leader_id, delay))

    def poll(self) -> None:
        core = self.core
        if core.now >= core.followed.fetch_deadline:
            if core.may_vote:
                self.elections.become_prospective()
            else:
                core.become_unattached(core.epoch)
            return
        core.maybe_send_fetch()

    # ------------------------------------------------------------------ Fetch responses

    def handle_fetch_response(
        self, request_id: int, pending: InFlight, resp: FetchResponse
    ) -> None:
        core = self.core
        if request_id != core.fetch_in_flight:
            return  # an answer to a fetch we abandoned
        core.fetch_in_flight = None
        if resp.error == ErrorCode.INCONSISTENT_CLUSTER_ID:
            # Another cluster's answer: its epoch and leader mean nothing here.
            self._refused_as_foreign(pending.dest)
            core.next_fetch_at = core.now + FOREIGN_CLUSTER_BACKOFF_MS
            return
        if core.observe_epoch(resp.leader_epoch, resp.leader_id):
            return
        if resp.error != ErrorCode.NONE or core.role is not Role.FOLLOWER:
            core.next_fetch_at = core.now + core.config.retry_backoff_ms
            if not core.may_vote:
                # Observers (and catching-up voters) look elsewhere for the leader.
                if core.role is Role.FOLLOWER:
                    core.become_unattached(core.epoch)
                else:
                    core.arm_unattached_timer()
            return
        following = core.followed
        core.push_fetch_deadline()
        following.refused = False
        following.fetched = True
        self.endpoints.maybe_update()  # a fetching follower's poll timer rarely fires
        if resp.snapshot_id is not None:
            self.snapshot_transfer.begin_download(pending.dest, resp.snapshot_id)
            return
        if resp.diverging_epoch is not None:
            self._rule_apply_diverging(resp.diverging_epoch)
        else:
            self._append_fetched(resp.batches)
            following.hw_seen = resp.high_watermark
            if following.first_hw is None:
                following.first_hw = resp.high_watermark
            new_hw = min(resp.high_watermark, core.log.end_offset())
            if new_hw > core.high_watermark:
                core.high_watermark = new_hw
                core.hw_changed_to = new_hw
                if core.history.dynamic:
                    core.voters_changed()  # a no-op unless a rule hook reads the commit
        # An observer paces its Fetches (QuorumConfig.observer_fetch_interval_ms); a voter,
        # also one catching up after a disk loss, fetches again at once.
        pace = 0 if core.is_voter else core.config.observer_fetch_interval_ms
        core.next_fetch_at = core.now + pace
        core.maybe_send_fetch()

    def _refused_as_foreign(self, dest: int) -> None:
        """A voter answered our Fetch with INCONSISTENT_CLUSTER_ID: this node's directory was
        formatted for another cluster, and no retry can succeed. Say so (once per
        FOREIGN_CLUSTER_NOTE_MS, not on every retry) and retry slowly."""
        core = self.core
        if core.now - core.foreign_cluster_noted_at < FOREIGN_CLUSTER_NOTE_MS:
            return
        core.foreign_cluster_noted_at = core.now
        core.events.append(ForeignCluster(dest, core.cluster_id))

    def _append_fetched(self, batches: Iterable[Batch]) -> None:
        core = self.core
        appended = voters_moved = False
        for batch in batches:
            end = core.log.end_offset()
            if batch.last_offset < end:
                continue  # already held (the fetch was validated against our end offset)
            if batch.base_offset != end or batch.epoch < core.log.last_epoch():
                break  # not contiguous: drop the rest and fetch again
            core.log.append(batch)
            core.producers.on_append(batch)
            if batch.is_control and core.history.on_batch(batch):
                voters_moved = True
            appended = True
        if appended:
            core.request_flush()
        if voters_moved:
            core.voters_changed()
