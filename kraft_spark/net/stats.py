"""Counters a node keeps for its metrics (docs/operations/metrics.md); rendered by
``kraft_spark.net.metrics``."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from kraft_spark.raft.events import CoreEvent, RoleChanged
from kraft_spark.raft.messages import FetchRequest, ProduceRequest, Request
from kraft_spark.raft.state import Role


@dataclass
class NodeStats:
    boot_timestamp_ms: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    appended_records: int = 0
    fetch_requests: int = 0
    flushes: int = 0
    flush_seconds_total: float = 0.0
    flush_seconds_max: float = 0.0
    elections: int = 0
    election_seconds_total: float = 0.0
    election_seconds_max: float = 0.0
    _election_started: float | None = None
    high_watermark: int = 0

    def on_request(self, message: Request) -> None:
        self.requests[type(message).__name__] += 1
        if isinstance(message, ProduceRequest):
            self.appended_records += len(message.records)
        elif isinstance(message, FetchRequest):
            self.fetch_requests += 1

    def on_flush(self, seconds: float) -> None:
        self.flushes += 1
        self.flush_seconds_total += seconds
        self.flush_seconds_max = max(self.flush_seconds_max, seconds)

    def on_event(self, event: CoreEvent) -> None:
        """Role changes: time from losing a leader (candidacy) to knowing a new one."""
        if not isinstance(event, RoleChanged) or event.started:
            return
        if event.role is Role.CANDIDATE and self._election_started is None:
            self._election_started = time.monotonic()
        elif event.role in (Role.LEADER, Role.FOLLOWER) and (
            self._election_started is not None
        ):
            seconds = time.monotonic() - self._election_started
            self._election_started = None
            self.elections += 1
            self.election_seconds_total += seconds
            self.election_seconds_max = max(self.election_seconds_max, seconds)

    def on_high_watermark(self, hw: int) -> None:
        self.high_watermark = hw
