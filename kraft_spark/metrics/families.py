"""The application's own metric families (docs/operations/metrics.md), prefixed ``kraft_spark_``:
the driver's materialization and Delta metrics, and the HTTP front end's request metrics."""

from __future__ import annotations

from kraft_spark.metrics.names import app_metric_name
from kraft_spark.metrics.registry import Registry


class AppMetrics:
    """The driver's metrics: materialization lag, barrier restarts, Delta commits and
    compactions by table."""

    def __init__(self, registry: Registry) -> None:
        self.materialization_lag_offsets = registry.gauge(
            app_metric_name("materialization-lag-offsets"),
            "Committed offsets not yet materialized into the Delta records table.",
            exist_ok=True,
        )
        self.materialization_lag_ms = registry.gauge(
            app_metric_name("materialization-lag-ms"),
            "Age in milliseconds of the oldest committed record not yet materialized; "
            "0 when caught up.",
            exist_ok=True,
        )
        self.barrier_stage_restarts = registry.counter(
            app_metric_name("barrier-stage-restarts-total"),
            "Times the barrier stage hosting the voters was restarted.",
            exist_ok=True,
        )
        self.delta_table_offset = registry.gauge(
            app_metric_name("delta-table-offset"),
            "Next Raft offset to materialize into each Delta table (it holds everything below), "
            "by table.",
            ("table",),
            exist_ok=True,
        )
        by_table = (
            ("delta-commits-total", "Materializer commits to each Delta table, by table."),
            ("delta-compactions-total",
             "Compactions (OPTIMIZE) of a Delta table by the driver, by table."),
            ("delta-compacted-files-total",
             "Small data files replaced by compactions, by table."),
            ("delta-compaction-failures-total",
             "Compactions that failed (retried at the next cycle), by table."),
        )
        counters = [registry.counter(app_metric_name(name), text, ("table",), exist_ok=True)
                    for name, text in by_table]
        (self.delta_commits, self.delta_compactions, self.delta_compacted_files,
         self.delta_compaction_failures) = counters


class HttpMetrics:
    """HTTP request metrics, recorded by the API's middleware and its fast paths."""

    def __init__(self, registry: Registry) -> None:
        self.request_latency = registry.sensor(
            app_metric_name("http-request-latency-ms"),
            "HTTP request latency in milliseconds, by method and route",
            ("method", "route"),
            stats=("avg", "max"),
            exist_ok=True,
        )
        self.requests = registry.counter(
            app_metric_name("http-requests-total"),
            "HTTP requests answered, by method, route and status code.",
            ("method", "route", "status"),
            exist_ok=True,
        )
        self.appended_records = registry.counter(
            app_metric_name("http-appended-records-total"),
            "Records appended and committed through the HTTP sidecar (replays excluded).",
            exist_ok=True,
        )

    def observe(self, method: str, route: str, status: int, latency_ms: float) -> None:
        self.request_latency.labels(method, route).record(latency_ms)
        self.requests.labels(method, route, status).inc()
