"""Metric names (docs/operations/metrics.md): Kafka's ``raft-metrics`` group as
``kafka_raft_<name>``, the application's own metrics as ``kraft_spark_<name>``, dashes as
underscores."""

from __future__ import annotations

from typing import Final

RAFT_PREFIX: Final = "kafka_raft_"
APP_PREFIX: Final = "kraft_spark_"


def raft_metric_name(kafka_name: str) -> str:
    """``commit-latency-avg`` → ``kafka_raft_commit_latency_avg``."""
    return RAFT_PREFIX + kafka_name.replace("-", "_")


def app_metric_name(name: str) -> str:
    """``http-request-latency-ms`` → ``kraft_spark_http_request_latency_ms``."""
    return APP_PREFIX + name.replace("-", "_")
