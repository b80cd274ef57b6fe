"""One process's metrics on prometheus-client: gauges, counters, Kafka-style sensors and
collectors read at scrape time, exposed in the text format or OpenMetrics as the scraper asks.

Each :class:`Registry` owns a ``prometheus_client.CollectorRegistry`` (never the global one:
a driver, its sidecar and the tests' in-process nodes must not see each other's metrics).
Counters' ``_created`` series are disabled process-wide: Kafka has no such series and the
families a dashboard sees stay the ones it saw before the move to prometheus-client.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

import prometheus_client
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from kraft_spark.metrics.sensor import Clock, Sensor

# The classic text format, what Prometheus scrapes when it does not ask for OpenMetrics.
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

# Classic names only: prometheus-client accepts UTF-8 names, which the text format 0.0.4 and
# Kafka-style dashboards do not.
_NAME_RE: Final = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")

Gauge = prometheus_client.Gauge
Counter = prometheus_client.Counter

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


def _nan_on_error(fn: Callable[[], float]) -> Callable[[], float]:
    """A gauge callback that reads NaN when ``fn`` raises: a scrape never fails on one value."""

    def read() -> float:
        try:
            return float(fn())
        except Exception:
            return math.nan

    return read


class Registry:
    """Metric families by name, registered once; ``exist_ok`` returns the family already
    registered under the name when its kind and label names match (several components of one
    process declare the families they use)."""

    def __init__(self, *, clock: Clock = time.monotonic) -> None:
        self.collectors = CollectorRegistry(auto_describe=True)
        self._clock = clock
        self._lock = threading.Lock()
        self._families: dict[str, tuple[tuple[object, ...], Gauge | Counter | Sensor]] = {}

    def _family(self, name: str, shape: tuple[object, ...], exist_ok: bool,
                create: Callable[[], Gauge | Counter | Sensor]) -> Gauge | Counter | Sensor:
        if not _NAME_RE.match(name):
            raise ValueError(f"invalid metric name {name!r}: use letters, digits, '_' and ':'")
        with self._lock:
            existing = self._families.get(name)
            if existing is not None:
                if exist_ok and existing[0] == shape:
                    return existing[1]
                raise ValueError(f"metric {name} is already registered")
            family = create()  # registers itself; a clash of exposed names raises ValueError
            self._families[name] = (shape, family)
            return family

    def gauge(self, name: str, help: str, labelnames: Sequence[str] = (), *,
              fn: Callable[[], float] | None = None, exist_ok: bool = False) -> Gauge:
        """A gauge; with ``fn`` (and no labels) its value is read from ``fn`` at each scrape."""
        family = self._family(
            name, ("gauge", tuple(labelnames)), exist_ok,
            lambda: Gauge(name, help, labelnames, registry=self.collectors))
        assert isinstance(family, Gauge)
        if fn is not None:
            family.set_function(_nan_on_error(fn))
        return family

    def counter(self, name: str, help: str, labelnames: Sequence[str] = (), *,
                exist_ok: bool = False) -> Counter:
        """By Prometheus convention name counters ``..._total``."""
        family = self._family(
            name, ("counter", tuple(labelnames)), exist_ok,
            lambda: Counter(name, help, labelnames, registry=self.collectors))
        assert isinstance(family, Counter)
        return family

    def sensor(self, name: str, help: str, labelnames: Sequence[str] = (), *,
               stats: Sequence[str] = ("avg", "max"), window_s: float = 30.0,
               buckets: int = 30, exist_ok: bool = False) -> Sensor:
        """A sensor exposing ``<name>_<stat>`` for each of ``stats`` (avg, max, rate, total)."""

        def create() -> Sensor:
            sensor = Sensor(name, help, labelnames, stats=stats, window_s=window_s,
                            buckets=buckets, clock=self._clock)
            self.collectors.register(sensor)
            return sensor

        family = self._family(name, ("sensor", tuple(labelnames), tuple(stats)), exist_ok,
                              create)
        assert isinstance(family, Sensor)
        return family

    def register(self, collector: Collector) -> None:
        """Add a collector whose metrics are read at scrape time (a node's state, say)."""
        self.collectors.register(collector)

    def get(self, name: str) -> Gauge | Counter | Sensor | None:
        """The family registered under ``name`` (a sensor's base name), if any."""
        with self._lock:
            entry = self._families.get(name)
        return entry[1] if entry is not None else None

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """The current value of one exposed sample, None if there is no such sample."""
        return self.collectors.get_sample_value(name, labels)

    def render(self) -> str:
        """Everything in the text exposition format 0.0.4."""
        return prometheus_client.generate_latest(self.collectors).decode()

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The body and content type for a scrape sending ``Accept: accept``: OpenMetrics when
        it asks for it, else the text format."""
        if accept and "application/openmetrics-text" in accept:
            encoder, content_type = choose_encoder(accept)
            return encoder(self.collectors), content_type
        return prometheus_client.generate_latest(self.collectors), CONTENT_TYPE
