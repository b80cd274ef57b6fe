"""The move to prometheus-client keeps every /metrics family: the names and types below are
the ones the hand-written registry served (captured from it before the move), for a node's
``metrics.port`` and for the application's HTTP front end."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kraft_spark.metrics import AppMetrics, HttpMetrics, Registry
from kraft_spark.net.metrics_server import render_node_metrics
from kraft_spark.net.node import RaftNode
from tests.metrics_text import family_types
from tests.net.helpers import make_nodes, run_nodes, the_leader

NODE_FAMILIES_BEFORE = {
    "kafka_raft_append_records_total": "counter",
    "kafka_raft_boot_timestamp": "gauge",
    "kafka_raft_commit_latency_avg": "gauge",
    "kafka_raft_commit_latency_max": "gauge",
    "kafka_raft_current_epoch": "gauge",
    "kafka_raft_current_leader": "gauge",
    "kafka_raft_current_state": "gauge",
    "kafka_raft_current_vote": "gauge",
    "kafka_raft_election_latency_avg": "gauge",
    "kafka_raft_election_latency_max": "gauge",
    "kafka_raft_fetch_requests_total": "counter",
    "kafka_raft_high_watermark": "gauge",
    "kafka_raft_latest_snapshot_epoch": "gauge",
    "kafka_raft_latest_snapshot_generated_bytes": "gauge",
    "kafka_raft_latest_snapshot_offset": "gauge",
    "kafka_raft_log_end_epoch": "gauge",
    "kafka_raft_log_end_offset": "gauge",
    "kafka_raft_log_start_offset": "gauge",
    "kafka_raft_number_unknown_voter_connections": "gauge",
    "kafka_raft_retention_passed_observer_total": "counter",
    "kafka_raft_snapshots_generated_total": "counter",
    "kafka_raft_uptime_seconds": "gauge",
}

# Added since (issue 25): the background scrub's counters.
NODE_FAMILIES_ADDED = {
    "kraft_spark_log_scrub_bytes_total": "counter",
    "kraft_spark_log_scrub_damaged_total": "counter",
    "kraft_spark_log_scrub_passes_total": "counter",
}

APP_FAMILIES_BEFORE = {
    "kraft_spark_barrier_stage_restarts_total": "counter",
    "kraft_spark_delta_commits_total": "counter",
    "kraft_spark_delta_compacted_files_total": "counter",
    "kraft_spark_delta_compaction_failures_total": "counter",
    "kraft_spark_delta_compactions_total": "counter",
    "kraft_spark_delta_table_offset": "gauge",
    "kraft_spark_http_appended_records_total": "counter",
    "kraft_spark_http_request_latency_ms_avg": "gauge",
    "kraft_spark_http_request_latency_ms_max": "gauge",
    "kraft_spark_http_requests_total": "counter",
    "kraft_spark_materialization_lag_ms": "gauge",
    "kraft_spark_materialization_lag_offsets": "gauge",
}


def test_a_nodes_families_are_the_ones_served_before(tmp_path: Path) -> None:
    seen: dict[str, dict[str, str]] = {}

    async def body(nodes: list[RaftNode]) -> None:
        for node in nodes:
            seen[str(node.node_id)] = family_types(render_node_metrics(node))
        seen["leader"] = family_types(render_node_metrics(the_leader(nodes)))

    asyncio.run(run_nodes(make_nodes(tmp_path), body))
    assert len(seen) == 4
    for families in seen.values():
        assert families == NODE_FAMILIES_BEFORE | NODE_FAMILIES_ADDED


def test_the_applications_families_are_the_ones_served_before() -> None:
    registry = Registry()
    AppMetrics(registry)
    HttpMetrics(registry).observe("POST", "/v1/records", 200, 1.0)
    assert family_types(registry.render()) == APP_FAMILIES_BEFORE
