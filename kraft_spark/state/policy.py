"""When to write a snapshot and how far retention may move the log start (KIP-630), with
Kafka's setting names and defaults. Pure functions of the node's numbers, asked by the node's
``StateKeeper`` (the simulator triggers its snapshots on its own, kraft_spark/sim/snapshots.py).

Snapshots: one is due when the committed records applied since the newest snapshot reach
``metadata.log.max.record.bytes.between.snapshots`` bytes (default 20 MiB), or when
``metadata.log.max.snapshot.interval.ms`` (default 1 hour) has passed since the newest one and
anything was applied since. Snapshots are only taken of applied, hence committed, state.

Beyond Kafka (``kraft.snapshot.log.ratio``, default 4, LogCabin's ``snapshotRatio``): the bytes
since the newest snapshot must also reach that many times its size. A snapshot writes the whole
state, so with a large state Kafka's rule alone rewrites it every 20 MiB of records: 733,200
keys (a 154 MB snapshot) under 100-record batches had every node writing one back to back (3-5
s each, ~50 MB/s per node), which halved the leader's throughput (165,000 -> 70,000 records/s)
and stalled the disk. With the ratio, snapshots write at most a quarter of the log's bytes again.
0 turns it off.

Retention: when the log plus the snapshots exceed ``metadata.max.retention.bytes`` (default
100 MiB), or the oldest segment's newest record is older than ``metadata.max.retention.ms``
(default 7 days), the log start moves to the newest snapshot's end offset: segments wholly
below it are deleted and so are older snapshots (the one at the new start is kept). The log
start only ever lands on a snapshot's end offset, so a node can always serve FetchSnapshot for
what it deleted. -1 disables a limit.

Beyond Kafka (``kraft.retention.hold.observers``, default true): the log start does not pass
the offset the observers (the Spark driver's materializer) have fetched, so ``records`` in
Delta keeps the full history; it stops at the newest snapshot at or below that offset. The
size limit still wins: when it is exceeded, retention passes the hold (the node logs it and
counts it in ``retention_passed_observer_total``), and an observer that falls that far behind
bootstraps from a snapshot, with the gap recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kraft_spark.raft.config import ConfigError
from kraft_spark.raft.log_api import OffsetAndEpoch

MIB = 1024 * 1024
DEFAULT_SEGMENT_BYTES = 64 * MIB  # Kafka: 1 GiB; see SegmentedLog's DEFAULT_SEGMENT_BYTES
MIN_SEGMENT_BYTES = 1024  # Kafka's floor is 8 MiB; tests and the simulator need small ones


@dataclass(frozen=True, slots=True)
class SnapshotConfig:
    max_bytes_between_snapshots: int = 20 * MIB
    max_snapshot_interval_ms: int = 3_600_000
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    retention_bytes: int = 100 * MIB
    retention_ms: int = 7 * 24 * 3_600_000
    hold_for_observers: bool = True
    snapshot_log_ratio: float = 4.0

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> SnapshotConfig:
        def number(key: str, default: int, low: int) -> int:
            raw = props.get(key, "").strip()
            if not raw:
                return default
            try:
                value = int(raw)
            except ValueError:
                value = low - 1
            if value < low:
                raise ConfigError(f"{key} must be an integer ≥ {low}, got {raw!r}")
            return value

        hold = props.get("kraft.retention.hold.observers", "true").strip().lower() or "true"
        if hold not in ("true", "false"):
            raise ConfigError(f"kraft.retention.hold.observers must be true or false, got {hold!r}")
        base = cls()
        raw_ratio = props.get("kraft.snapshot.log.ratio", "").strip()
        try:
            ratio = float(raw_ratio) if raw_ratio else base.snapshot_log_ratio
        except ValueError:
            ratio = -1.0
        if not 0 <= ratio <= 1000:
            raise ConfigError("kraft.snapshot.log.ratio must be a number from 0 to 1000, got "
                              f"{raw_ratio!r}")
        return cls(
            max_bytes_between_snapshots=number(
                "metadata.log.max.record.bytes.between.snapshots",
                base.max_bytes_between_snapshots, 1),
            max_snapshot_interval_ms=number(
                "metadata.log.max.snapshot.interval.ms", base.max_snapshot_interval_ms, 0),
            segment_bytes=number("metadata.log.segment.bytes", base.segment_bytes,
                                 MIN_SEGMENT_BYTES),
            retention_bytes=number("metadata.max.retention.bytes", base.retention_bytes, -1),
            retention_ms=number("metadata.max.retention.ms", base.retention_ms, -1),
            hold_for_observers=hold == "true",
            snapshot_log_ratio=ratio,
        )


def snapshot_due(
    config: SnapshotConfig, *, bytes_since: int, applied_since: bool, ms_since: int,
    last_snapshot_bytes: int = 0,
) -> bool:
    """Whether to snapshot now, given the bytes of records applied since the newest snapshot,
    whether anything was applied since, the time since it (or since start-up) and its size
    (0: none on disk)."""
    if not applied_since:
        return False
    threshold = max(config.max_bytes_between_snapshots,
                    int(config.snapshot_log_ratio * last_snapshot_bytes))
    if bytes_since >= threshold:
        return True
    interval = config.max_snapshot_interval_ms
    return interval > 0 and ms_since >= interval


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    new_start: int | None  # None: leave the log start where it is
    passed_hold: bool = False
    reason: str = ""


def retention_decision(
    config: SnapshotConfig,
    *,
    log_start: int,
    segments: Sequence[tuple[int, int, int, int]],
    snapshots: Sequence[OffsetAndEpoch],
    snapshot_bytes: int,
    now_ms: int,
    observer_hold: int | None,
) -> RetentionDecision:
    """``segments``: ``(base, end, bytes, newest timestamp)`` oldest first; ``snapshots``
    sorted oldest first; ``observer_hold``: the lowest offset the observers still need (None:
    no hold)."""
    if not snapshots or not segments:
        return RetentionDecision(None)
    total = sum(s[2] for s in segments) + snapshot_bytes
    over_size = config.retention_bytes >= 0 and total > config.retention_bytes
    oldest_ts = segments[0][3]
    too_old = (
        config.retention_ms >= 0 and len(segments) > 1 and oldest_ts >= 0
        and now_ms - oldest_ts > config.retention_ms
    )
    if not (over_size or too_old):
        return RetentionDecision(None)
    reason = (f"{total} bytes > metadata.max.retention.bytes={config.retention_bytes}"
              if over_size else f"records older than metadata.max.retention.ms="
              f"{config.retention_ms}")
    newest = snapshots[-1].offset
    if newest <= log_start:
        return RetentionDecision(None)
    if config.hold_for_observers and observer_hold is not None and observer_hold < newest:
        if over_size:
            return RetentionDecision(newest, passed_hold=True, reason=reason)
        held = [s.offset for s in snapshots if log_start < s.offset <= observer_hold]
        return RetentionDecision(held[-1] if held else None, reason=reason)
    return RetentionDecision(newest, reason=reason)
