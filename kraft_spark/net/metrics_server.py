"""A node's metrics (docs/operations/metrics.md: Kafka's ``raft-metrics`` names), read by a
prometheus-client collector at scrape time; text format 0.0.4, or OpenMetrics when the scraper
asks for it.

``GET /metrics`` on the optional ``metrics.port``: a minimal HTTP/1.0 responder on the node's
own event loop, so a scrape sees the state between two core steps, never in the middle of one.
Names are Kafka's, prefixed ``kafka_raft_`` with dashes as underscores, labelled by node id.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kraft_spark.metrics import Registry
from kraft_spark.net.scrub import ScrubStats
from kraft_spark.raft.state import Role

if TYPE_CHECKING:
    from kraft_spark.net.node import RaftNode

# Kafka's current-state values are strings; Prometheus wants numbers, so the state is a label.
_STATES = {
    Role.LEADER: "leader",
    Role.CANDIDATE: "candidate",
    Role.FOLLOWER: "follower",
    Role.UNATTACHED: "unattached",
    Role.RESIGNED: "resigned",
    Role.PROSPECTIVE: "prospective",
}


class NodeMetricsCollector(Collector):
    """A prometheus-client collector reading one node's state at scrape time."""

    def __init__(self, node: RaftNode) -> None:
        self._node = node

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names are fixed below; nothing to check against at registration

    def collect(self) -> Iterator[Metric]:
        node = self._node
        core, stats = node.core, node.stats
        label = str(node.node_id)

        def metric(name: str, kind: str, help_text: str, value: float,
                   state: str | None = None) -> Metric:
            full = f"kafka_raft_{name.replace('-', '_')}"
            labels = ["node_id"] if state is None else ["node_id", "state"]
            family: Metric
            if kind == "counter":
                family = CounterMetricFamily(full, help_text, labels=labels)
            else:
                family = GaugeMetricFamily(full, help_text, labels=labels)
            family.add_metric([label] if state is None else [label, state], value)
            return family

        role = core.role
        if role is Role.UNATTACHED and core.voted_id >= 0:
            state = "voted"
        elif role is Role.UNATTACHED and not core.is_voter:
            state = "observer"
        else:
            state = _STATES.get(role, role.name.lower())
        yield metric("current-state", "gauge", "1 for the node's current state", 1, state)
        yield metric("current-leader", "gauge", "current leader id, -1 if unknown",
                     core.known_leader())
        yield metric("current-vote", "gauge", "voted-for id, -1 if none", core.voted_id)
        yield metric("current-epoch", "gauge", "current quorum epoch", core.epoch)
        yield metric("high-watermark", "gauge", "high watermark", node.high_watermark)
        yield metric("log-end-offset", "gauge", "log end offset", node.log.end_offset())
        yield metric("log-end-epoch", "gauge", "epoch of the last log batch",
                     node.log.last_epoch())
        keeper = node.keeper
        latest = keeper.store.latest_id()
        # KIP-630: Kafka's LogStartOffset and SnapshotEmitter names, and our retention counter.
        yield metric("log-start-offset", "gauge", "log start offset (KIP-630)",
                     node.log.start_offset())
        yield metric("latest-snapshot-offset", "gauge",
                     "end offset of the newest snapshot, -1 if none",
                     latest.offset if latest else -1)
        yield metric("latest-snapshot-epoch", "gauge", "epoch of the newest snapshot, -1 if none",
                     latest.epoch if latest else -1)
        yield metric("latest-snapshot-generated-bytes", "gauge",
                     "size of the snapshot this node wrote last", keeper.last_snapshot_bytes)
        yield metric("snapshots-generated-total", "counter", "snapshots this node wrote",
                     keeper.snapshots_generated)
        yield metric("retention-passed-observer-total", "counter",
                     "times the size limit made retention delete what observers had not fetched",
                     keeper.retention_passed_observer)
        unknown = sum(1 for v in node.config.voters
                      if v != node.node_id and not node.peer_connected(v))
        yield metric("number-unknown-voter-connections", "gauge",
                     "voters this node has no live connection to", unknown)
        avg = stats.election_seconds_total / stats.elections if stats.elections else 0.0
        yield metric("election-latency-avg", "gauge", "mean election time (ms)",
                     round(avg * 1000, 3))
        yield metric("election-latency-max", "gauge", "max election time (ms)",
                     round(stats.election_seconds_max * 1000, 3))
        favg = stats.flush_seconds_total / stats.flushes if stats.flushes else 0.0
        yield metric("commit-latency-avg", "gauge", "mean log flush time (ms)",
                     round(favg * 1000, 3))
        yield metric("commit-latency-max", "gauge", "max log flush time (ms)",
                     round(stats.flush_seconds_max * 1000, 3))
        yield metric("append-records-total", "counter", "records received in Produce requests",
                     stats.appended_records)
        yield metric("fetch-requests-total", "counter", "Fetch requests served",
                     stats.fetch_requests)
        yield metric("boot-timestamp", "gauge", "boot time (ms since epoch)",
                     stats.boot_timestamp_ms)
        yield metric("uptime-seconds", "gauge", "seconds since boot",
                     round(time.time() - stats.boot_timestamp_ms / 1000, 3))
        scrub = node.scrubber.stats if node.scrubber is not None else ScrubStats()
        for name, text, value in (
            ("bytes", "sealed segment bytes whose CRCs were verified", scrub.bytes_verified),
            ("passes", "passes of the scrub over every sealed segment", scrub.passes),
            ("damaged", "damaged batches the scrub found", scrub.damaged),
        ):
            family = CounterMetricFamily(f"kraft_spark_log_scrub_{name}_total", text,
                                         labels=["node_id"])
            family.add_metric([label], value)
            yield family


def node_registry(node: RaftNode) -> Registry:
    """A registry holding ``node``'s metrics, read at each scrape."""
    registry = Registry()
    registry.register(NodeMetricsCollector(node))
    return registry


def render_node_metrics(node: RaftNode) -> str:
    """``node``'s metrics in the text exposition format 0.0.4."""
    return node_registry(node).render()


async def _accept_header(reader: asyncio.StreamReader) -> str | None:
    """The request's Accept header, reading the header lines up to the blank one."""
    accept = None
    for _ in range(100):
        line = await asyncio.wait_for(reader.readline(), 5.0)
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"accept":
            accept = value.strip().decode("latin-1")
    return accept


async def start_metrics_server(node: RaftNode, host: str, port: int) -> asyncio.Server:
    registry = node_registry(node)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5.0)
            path = request.split(b" ")[1] if request.count(b" ") >= 2 else b""
            accept = await _accept_header(reader)
            if path.split(b"?")[0] == b"/metrics":
                body, content_type = registry.exposition(accept)
                head = b"HTTP/1.0 200 OK\r\nContent-Type: %s\r\n" % content_type.encode()
            else:
                body = b"not found: try /metrics\n"
                head = b"HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
            writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()
        except (TimeoutError, ConnectionError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port)
