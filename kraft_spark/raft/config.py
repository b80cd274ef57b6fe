"""Quorum configuration with Kafka's names and defaults (docs/operations/configuration.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

# Kafka property name -> attribute of QuorumConfig.
PROPERTY_NAMES: dict[str, str] = {
    "controller.quorum.fetch.timeout.ms": "fetch_timeout_ms",
    "controller.quorum.election.timeout.ms": "election_timeout_ms",
    "controller.quorum.election.backoff.max.ms": "election_backoff_max_ms",
    "controller.quorum.request.timeout.ms": "request_timeout_ms",
    "controller.quorum.retry.backoff.ms": "retry_backoff_ms",
    "controller.quorum.append.linger.ms": "append_linger_ms",
    "controller.quorum.fetch.max.wait.ms": "fetch_max_wait_ms",
    # Not a Kafka setting (hence the prefix): see QuorumConfig.hw_wakeup_delay_ms.
    "kraft.quorum.hw.wakeup.delay.ms": "hw_wakeup_delay_ms",
    "kraft.quorum.lone.append.hold.ms": "lone_append_hold_ms",
    "kraft.quorum.fetch.timeout.jitter.ms": "fetch_timeout_jitter_ms",
    "kraft.quorum.observer.fetch.interval.ms": "observer_fetch_interval_ms",
}


class ConfigError(ValueError):
    """A configuration value is missing or out of range; the message names the key."""


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """Timing and size settings of one node. All durations are milliseconds."""

    fetch_timeout_ms: int = 2000
    election_timeout_ms: int = 1000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    append_linger_ms: int = 2
    fetch_max_wait_ms: int = 500
    # A leader holds a parked Fetch that has no new data but could learn a newer high watermark
    # for up to this long: an append arriving meanwhile answers it with the data and the new
    # high watermark in one response. Answering at once (0, what Kafka does) costs every commit
    # a second round of empty Fetch responses and requests, which under sequential appends
    # lands on the next append's critical path.
    hw_wakeup_delay_ms: int = 5
    # A lone append (the only one awaiting commit) goes first to the voter that acknowledged
    # the last commit first; the other voters' parked Fetches get it when that voter
    # acknowledges it, or after this long at the latest (0: to everyone at once, as Kafka).
    # When voters share CPU cores (one machine: local mode, the Spark application), the other
    # voters' work on the same batch otherwise competes with the one that will commit it.
    # Measured (wrk, HTTP in the leader, 1 client, 0 vs 2 in nine alternating runs): p50 median
    # 0.34 -> 0.29 ms, p99 median 0.69 -> 0.73 ms (a commit waits for that one voter instead of
    # the faster of two). Only
    # while appends come one at a time (leader.CONCURRENT_WINDOW_MS: holding under concurrent
    # appends cost 16 connections 4-6 %), and only with 3 voters or fewer, where the leader and
    # one voter are a majority. Every 32nd lone append goes to every voter at once, so a voter
    # grown faster can take over as the quickest (leader.HOLD_PROBE_EVERY).
    lone_append_hold_ms: int = 2
    # A voting follower waits fetch.timeout.ms plus a jitter drawn once per leader from
    # [0, this] before it campaigns (vote_rules.fetch_timeout_jitter_ms: followers that fetch
    # in lockstep otherwise split the vote on every frozen leader). -1: election timeout / 2;
    # 0: none, as Kafka.
    fetch_timeout_jitter_ms: int = -1
    # An observer (a node outside the voter set) sends its next Fetch this long after an
    # answer at the earliest, and gets everything appended meanwhile in one response; 0: at
    # once (Kafka). Not for voters: their Fetches are the commit path. The Spark application's
    # observer uses 50 ms: one Fetch per commit at ~750 sequential commits/s cost the driver's
    # process (on the voters' cores) a response per commit for a table written every 0.5 s.
    observer_fetch_interval_ms: int = 0
    fetch_max_bytes: int = 8 * 1024 * 1024
    # The most a FetchSnapshot answer carries; 0: fetch_max_bytes. The simulator sets it apart
    # from its one-batch fetches: 1-byte chunks made a download of a few hundred bytes take
    # hundreds of round trips, outlived the snapshot it fetched, and were 40 % of its messages.
    fetch_snapshot_max_bytes: int = 0
    max_batch_bytes: int = 1024 * 1024
    # Observers not seen for this long drop out of DescribeQuorum (KIP-595: 5 minutes).
    observer_expiry_ms: int = 300_000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            auto = f.name == "fetch_timeout_jitter_ms" and value == -1
            if not isinstance(value, int) or (value < 0 and not auto):
                raise ConfigError(f"{f.name} must be a non-negative integer, got {value!r}")
        if self.election_timeout_ms == 0 or self.fetch_timeout_ms == 0:
            raise ConfigError("election and fetch timeouts must be positive")
        # A leader holds an idle follower's Fetch for up to fetch.max.wait: the answer must
        # come before the follower gives up on the request, and on the leader. Otherwise an
        # idle quorum re-elects a leader every fetch timeout (seen with 500 ms / 500 ms / 600).
        for other, name in ((self.request_timeout_ms, "request.timeout.ms"),
                            (self.fetch_timeout_ms, "fetch.timeout.ms")):
            if self.fetch_max_wait_ms >= other:
                raise ConfigError(
                    f"controller.quorum.fetch.max.wait.ms ({self.fetch_max_wait_ms}) must be "
                    f"below controller.quorum.{name} ({other}): a Fetch waiting that long at an "
                    "idle leader would time out and start an election"
                )

    @property
    def max_fetch_jitter_ms(self) -> int:
        """The upper bound of the fetch-timeout jitter (``fetch_timeout_jitter_ms``, -1 being
        election timeout / 2)."""
        if self.fetch_timeout_jitter_ms < 0:
            return self.election_timeout_ms // 2
        return self.fetch_timeout_jitter_ms

    @property
    def snapshot_chunk_bytes(self) -> int:
        """The most one FetchSnapshot answer carries."""
        return self.fetch_snapshot_max_bytes or self.fetch_max_bytes

    @property
    def check_quorum_timeout_ms(self) -> int:
        """A leader without Fetches from a majority for this long resigns (1.5 × fetch timeout)."""
        return self.fetch_timeout_ms * 3 // 2

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> QuorumConfig:
        """Build from Kafka-named properties; unknown ``controller.quorum.*`` keys are errors."""
        values: dict[str, int] = {}
        for key, raw in props.items():
            if key in PROPERTY_NAMES:
                try:
                    values[PROPERTY_NAMES[key]] = int(raw)
                except ValueError:
                    raise ConfigError(f"{key} must be an integer, got {raw!r}") from None
            elif key.startswith("controller.quorum.") and key not in (
                "controller.quorum.voters",
                "controller.quorum.bootstrap.servers",
            ):
                raise ConfigError(f"unknown quorum setting {key!r}")
        return cls(**values)
