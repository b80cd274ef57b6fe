"""Metrics on prometheus-client (every family: docs/operations/metrics.md).

* :mod:`.registry`: a process's :class:`Registry` (gauges, counters, sensors, scrape-time
  collectors) and its exposition, text 0.0.4 or OpenMetrics.
* :mod:`.sensor`: Kafka-style windowed statistics (``_avg``, ``_max``, ``_rate``, ``_total``).
* :mod:`.names`: ``kafka_raft_*`` for Kafka's raft-metrics, ``kraft_spark_*`` for ours.
* :mod:`.families`: the application's families (driver, HTTP).

A node's own ``kafka_raft_*`` metrics are read from the node at scrape time by the collector in
:mod:`kraft_spark.net.metrics_server`.

Example::

    registry = Registry()
    http = HttpMetrics(registry)
    http.observe("POST", "/v1/records", 200, 1.5)
    body, content_type = registry.exposition(request_accept_header)
"""

from kraft_spark.metrics.families import AppMetrics, HttpMetrics
from kraft_spark.metrics.names import APP_PREFIX, RAFT_PREFIX, app_metric_name, raft_metric_name
from kraft_spark.metrics.registry import CONTENT_TYPE, Counter, Gauge, Registry
from kraft_spark.metrics.sensor import SENSOR_STATS, Sensor, SensorWindow

__all__ = [
    "APP_PREFIX",
    "CONTENT_TYPE",
    "RAFT_PREFIX",
    "SENSOR_STATS",
    "AppMetrics",
    "Counter",
    "Gauge",
    "HttpMetrics",
    "Registry",
    "Sensor",
    "SensorWindow",
    "app_metric_name",
    "raft_metric_name",
]
