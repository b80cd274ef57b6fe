"""The metrics registry on prometheus-client: exposition, sensor windows on an injected clock,
names, registration rules."""

from __future__ import annotations

import math
import threading

import pytest

from kraft_spark.metrics import (
    AppMetrics,
    HttpMetrics,
    Registry,
    app_metric_name,
    raft_metric_name,
)
from tests.metrics_text import samples


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_names_map_kafka_raft_metrics_and_application_metrics() -> None:
    assert raft_metric_name("high-watermark") == "kafka_raft_high_watermark"
    assert raft_metric_name("commit-latency-avg") == "kafka_raft_commit_latency_avg"
    assert app_metric_name("materialization-lag-ms") == "kraft_spark_materialization_lag_ms"


def test_gauge_and_counter_exposition_with_help_type_and_labels() -> None:
    registry = Registry()
    gauge = registry.gauge("kafka_raft_high_watermark", "The high watermark.", ["node_id"])
    gauge.labels(node_id=1).set(42)
    counter = registry.counter("kraft_spark_things_total", "Things.\nSecond line", ["kind"])
    counter.labels(kind='a"b\\c').inc()
    counter.labels(kind='a"b\\c').inc(2)
    counter.labels("x").inc(0.5)
    text = registry.render()
    assert text == (
        "# HELP kafka_raft_high_watermark The high watermark.\n"
        "# TYPE kafka_raft_high_watermark gauge\n"
        'kafka_raft_high_watermark{node_id="1"} 42.0\n'
        "# HELP kraft_spark_things_total Things.\\nSecond line\n"
        "# TYPE kraft_spark_things_total counter\n"
        'kraft_spark_things_total{kind="a\\"b\\\\c"} 3.0\n'
        'kraft_spark_things_total{kind="x"} 0.5\n'
    )
    assert registry.sample("kraft_spark_things_total", {"kind": 'a"b\\c'}) == 3


def test_openmetrics_when_the_scraper_asks_for_it() -> None:
    registry = Registry()
    registry.counter("kraft_spark_things_total", "Things.").inc(2)
    body, content_type = registry.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.decode().splitlines()[-2:] == ["kraft_spark_things_total 2.0", "# EOF"]
    body, content_type = registry.exposition("text/plain")
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert "# EOF" not in body.decode()
    assert "_created" not in body.decode()  # no series Kafka does not have


def test_gauge_callback_is_read_at_scrape_time_and_nan_when_it_fails() -> None:
    registry = Registry()
    box = [1.5]
    registry.gauge("g", "a callback", fn=lambda: box[0])
    assert samples(registry.render())["g"] == 1.5
    box[0] = 7
    assert samples(registry.render())["g"] == 7

    def broken() -> float:
        raise RuntimeError("boom")

    registry.gauge("h", "a failing callback", fn=broken)
    assert math.isnan(samples(registry.render())["h"])  # the scrape itself does not fail


def test_values_format_ints_floats_and_infinities() -> None:
    registry = Registry()
    g = registry.gauge("g", "g", ["v"])
    g.labels("ts").set(1_700_000_000_000)
    g.labels("float_int").set(3.0)
    g.labels("frac").set(0.25)
    g.labels("inf").set(math.inf)
    g.labels("neg").set(-2)
    out = samples(registry.render())
    assert out['g{v="ts"}'] == 1_700_000_000_000  # a millisecond timestamp survives exactly
    assert out['g{v="float_int"}'] == 3
    assert out['g{v="frac"}'] == 0.25
    assert out['g{v="inf"}'] == math.inf
    assert 'g{v="inf"} +Inf' in registry.render()
    assert out['g{v="neg"}'] == -2


def test_counter_refuses_to_go_down() -> None:
    counter = Registry().counter("c_total", "c")
    with pytest.raises(ValueError, match="non-negative"):
        counter.inc(-1)


def test_sensor_avg_max_over_a_30s_window_of_1s_buckets() -> None:
    clock = FakeClock(1000.0)
    registry = Registry(clock=clock)
    sensor = registry.sensor("kafka_raft_commit_latency", "Commit latency in ms.")
    stats = sensor.stats_now()
    assert math.isnan(stats["avg"])
    assert math.isnan(stats["max"])
    sensor.record(10)
    clock.now = 1010.0
    sensor.record(30)
    sensor.record(20)
    assert sensor.stats_now()["avg"] == 20.0
    assert sensor.stats_now()["max"] == 30.0
    text = registry.render()
    assert "# TYPE kafka_raft_commit_latency_avg gauge" in text
    assert "# TYPE kafka_raft_commit_latency_max gauge" in text
    assert samples(text) == {
        "kafka_raft_commit_latency_avg": 20,
        "kafka_raft_commit_latency_max": 30,
    }
    # The sample recorded at t=1000 (bucket 1000) leaves the window when bucket 1030 begins.
    clock.now = 1029.9
    assert sensor.stats_now()["max"] == 30.0
    assert sensor.stats_now()["avg"] == 20.0
    clock.now = 1030.0
    assert sensor.stats_now()["avg"] == 25.0
    clock.now = 1040.0
    stats = sensor.stats_now()
    assert math.isnan(stats["avg"])
    assert math.isnan(stats["max"])


def test_sensor_rate_is_sum_per_second_over_the_elapsed_window() -> None:
    clock = FakeClock(500.0)
    registry = Registry(clock=clock)
    sensor = registry.sensor(
        "kafka_raft_fetch_records", "Records fetched.", stats=("rate", "total")
    )
    for _ in range(10):
        sensor.record(5)  # 50 records at t=500
    # Created at t=500: elapsed is floored at one bucket (1 s) → 50 / 1.
    assert sensor.stats_now()["rate"] == 50.0
    clock.now = 510.0
    assert sensor.stats_now()["rate"] == 5.0  # 50 over the 10 s since creation
    clock.now = 529.5
    assert sensor.stats_now()["rate"] == pytest.approx(50 / 29.5)
    # Window full: at t=540 it covers buckets 511..540 (29 s + 0 s into bucket 540): nothing in it.
    clock.now = 540.0
    assert sensor.stats_now()["rate"] == 0.0
    assert sensor.stats_now()["total"] == 50.0
    sensor.record(60)
    clock.now = 540.5
    # Window start = (540 - 29) * 1 = 511 → 29.5 s.
    assert sensor.stats_now()["rate"] == pytest.approx(60 / 29.5)
    text = registry.render()
    assert "# TYPE kafka_raft_fetch_records_rate gauge" in text
    assert "# TYPE kafka_raft_fetch_records_total counter" in text
    assert samples(text)["kafka_raft_fetch_records_total"] == 110


def test_sensor_window_is_configurable() -> None:
    clock = FakeClock(0.0)
    sensor = Registry(clock=clock).sensor("s", "s", window_s=2.0, buckets=4)  # 0.5 s buckets
    sensor.record(1)
    clock.now = 1.49
    assert sensor.stats_now()["avg"] == 1.0
    clock.now = 2.0  # bucket 4 begins: bucket 0 leaves (window = buckets 1..4)
    assert math.isnan(sensor.stats_now()["avg"])


def test_labelled_sensor_children_are_independent() -> None:
    clock = FakeClock()
    registry = Registry(clock=clock)
    sensor = registry.sensor("lat", "latency", ["route"])
    sensor.labels(route="/a").record(1)
    sensor.labels(route="/b").record(3)
    out = samples(registry.render())
    assert out['lat_avg{route="/a"}'] == 1
    assert out['lat_max{route="/b"}'] == 3


def test_registration_conflicts_and_label_errors() -> None:
    registry = Registry()
    registry.gauge("g", "g")
    with pytest.raises(ValueError, match="already registered"):
        registry.gauge("g", "g")
    assert registry.gauge("g", "g", exist_ok=True) is registry.get("g")
    with pytest.raises(ValueError, match="already registered"):
        registry.counter("g", "g", exist_ok=True)  # another kind
    registry.gauge("lat_avg", "clashes with a sensor stat")
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.sensor("lat", "latency")
    assert registry.get("lat") is None  # a refused registration leaves nothing behind
    with pytest.raises(ValueError, match="invalid metric name"):
        registry.gauge("bad-name", "x")
    labelled = registry.gauge("y", "y", ["a", "b"])
    with pytest.raises(ValueError, match="Incorrect label names"):
        labelled.labels(a=1)
    with pytest.raises(ValueError, match="missing label values"):
        labelled.set(1)
    with pytest.raises(ValueError, match="stats must be among"):
        registry.sensor("z", "z", stats=("p99",))
    with pytest.raises(ValueError, match="takes labels"):
        registry.sensor("w", "w", ["route"]).labels()


def test_app_and_http_metrics() -> None:
    registry = Registry()
    app = AppMetrics(registry)
    app.materialization_lag_offsets.set(12)
    app.barrier_stage_restarts.inc()
    app.delta_compactions.labels("records").inc()
    app.delta_compacted_files.labels("records").inc(39)
    http = HttpMetrics(registry)
    http.observe("POST", "/v1/records", 200, 2.5)
    assert HttpMetrics(registry).requests is http.requests  # idempotent registration
    out = samples(registry.render())
    assert out["kraft_spark_materialization_lag_offsets"] == 12
    assert out["kraft_spark_barrier_stage_restarts_total"] == 1
    assert out['kraft_spark_delta_compactions_total{table="records"}'] == 1
    assert out['kraft_spark_delta_compacted_files_total{table="records"}'] == 39
    latency = 'kraft_spark_http_request_latency_ms_avg{method="POST",route="/v1/records"}'
    assert out[latency] == 2.5
    assert out[
        'kraft_spark_http_requests_total{method="POST",route="/v1/records",status="200"}'
    ] == 1


def test_concurrent_recording_while_rendering() -> None:
    registry = Registry()
    counter = registry.counter("c_total", "c", ["t"])
    sensor = registry.sensor("s", "s", stats=("total",))
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            registry.render()

    scraper = threading.Thread(target=scrape)
    scraper.start()

    def work(i: int) -> None:
        for _ in range(2000):
            counter.labels(i % 2).inc()
            sensor.record(1)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    stop.set()
    scraper.join(timeout=30)
    out = samples(registry.render())
    assert out['c_total{t="0"}'] == 4000
    assert out['c_total{t="1"}'] == 4000
    assert out["s_total"] == 8000
