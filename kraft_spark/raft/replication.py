"""Pure rules of pull replication: the leader's Fetch validation and the follower's truncation."""

from __future__ import annotations

from kraft_spark.raft.log_api import OffsetAndEpoch, RaftLog
from kraft_spark.raft.snapshot_log import SnapshotAwareLog


def diverging_epoch(
    log: RaftLog, fetch_offset: int, last_fetched_epoch: int
) -> OffsetAndEpoch | None:
    """Leader side (docs/concepts/protocol.md): ``None`` when (FetchOffset, LastFetchedEpoch) is
    consistent with the leader's log, else the DivergingEpoch to send: the largest epoch ≤
    LastFetchedEpoch the leader has, with that epoch's end offset on the leader.

    Consistent means FetchOffset lies within epoch LastFetchedEpoch's offsets on the leader or is
    the start of the next epoch. An empty follower (0, 0) is always consistent.
    """
    if fetch_offset == 0 and last_fetched_epoch == 0:
        return None
    end = log.end_offset_for_epoch(last_fetched_epoch)
    if end.epoch != last_fetched_epoch or fetch_offset > end.offset:
        return end
    return None


def truncation_offset(log: RaftLog, diverging: OffsetAndEpoch) -> int:
    """Follower side: where to truncate on a DivergingEpoch.

    Records up to the end of epoch E are identical on leader and follower when both hold E (the
    epoch names the leader that wrote them), so the follower keeps the shorter of the two ends of
    E; if it does not hold E at all, it keeps everything before its own largest epoch below E.
    The next Fetch then either succeeds or narrows the divergence further.
    """
    if diverging.epoch == 0:
        return min(diverging.offset, log.end_offset())
    local = log.end_offset_for_epoch(diverging.epoch)
    if local.epoch == diverging.epoch:
        return min(local.offset, diverging.offset)
    return local.offset


def snapshot_to_send(
    log: SnapshotAwareLog, fetch_offset: int, last_fetched_epoch: int
) -> OffsetAndEpoch | None:
    """Leader side (KIP-630, Kafka's validateOffsetAndEpoch): the snapshot a fetcher must
    download instead of the log, or None when the log can answer (or tell the divergence).

    A snapshot is sent when the log starts after 0 and the fetcher is below the log start, or
    at it in another epoch than the snapshot there, or in an epoch older than that snapshot's.
    """
    start = log.start_offset()
    if start == 0:
        return None
    at_start = log.snapshot_at_start()
    if fetch_offset < start or (
        at_start is not None
        and (
            (fetch_offset == start and last_fetched_epoch != at_start.epoch)
            or last_fetched_epoch < at_start.epoch
        )
    ):
        return log.snapshots.latest_id()
    return None
