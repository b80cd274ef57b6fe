"""Kafka-style sensors on prometheus-client: statistics over a sliding window.

A :class:`Sensor` is a prometheus-client collector: one family of labelled
:class:`SensorWindow` children, exposed at scrape time as one Prometheus metric per statistic,
``<name>_<stat>``:

* ``avg`` and ``max`` of the values recorded in the window (NaN while it is empty, as Kafka
  reports), gauges;
* ``rate``: their sum per second over the window, a gauge;
* ``total``: the cumulative sum since creation, a counter.

The window (default 30 s) is kept as a ring of fixed-width buckets (default 30 of 1 s), so
memory is bounded whatever the rate. The clock is injected (seconds, monotonic) so tests step
time by hand.
"""

from __future__ import annotations

import math
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

SENSOR_STATS: Final = ("avg", "max", "rate", "total")
_LABEL_RE: Final = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

Clock = Callable[[], float]


class _Bucket:
    __slots__ = ("count", "index", "max", "sum")

    def __init__(self, index: int) -> None:
        self.index = index
        self.count = 0
        self.sum = 0.0
        self.max = -math.inf


class SensorWindow:
    """Values recorded into a sliding window of ``buckets`` buckets covering ``window_s``.

    Thread-safe: values may be recorded from any thread while another scrapes."""

    __slots__ = ("_buckets", "_clock", "_created", "_lock", "_n", "_total", "_width")

    def __init__(self, clock: Clock, window_s: float, buckets: int) -> None:
        self._clock = clock
        self._n = buckets
        self._width = window_s / buckets
        self._lock = threading.Lock()
        self._buckets: deque[_Bucket] = deque()
        self._created = clock()
        self._total = 0.0

    def _index(self, now: float) -> int:
        return math.floor(now / self._width)

    def _expire(self, index: int) -> None:
        while self._buckets and self._buckets[0].index <= index - self._n:
            self._buckets.popleft()

    def record(self, value: float = 1.0) -> None:
        now = self._clock()
        index = self._index(now)
        with self._lock:
            self._expire(index)
            if not self._buckets or self._buckets[-1].index < index:
                self._buckets.append(_Bucket(index))
            bucket = self._buckets[-1]  # a clock stepping back lands in the newest bucket
            bucket.count += 1
            bucket.sum += value
            bucket.max = max(bucket.max, value)
            self._total += value

    def stats(self) -> dict[str, float]:
        """``avg``, ``max``, ``rate`` (per second) over the window and the cumulative ``total``."""
        now = self._clock()
        index = self._index(now)
        with self._lock:
            self._expire(index)
            count = sum(b.count for b in self._buckets)
            total = sum(b.sum for b in self._buckets)
            peak = max((b.max for b in self._buckets), default=math.nan)
            cumulative = self._total
        window_start = max(self._created, (index - self._n + 1) * self._width)
        elapsed = max(now - window_start, self._width)
        return {
            "avg": total / count if count else math.nan,
            "max": peak,
            "rate": total / elapsed,
            "total": cumulative,
        }


class Sensor(Collector):
    """A family of sensor windows with fixed label names, exposing ``<name>_<stat>``."""

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        *,
        stats: Sequence[str] = ("avg", "max"),
        window_s: float = 30.0,
        buckets: int = 30,
        clock: Clock,
    ) -> None:
        unknown = [s for s in stats if s not in SENSOR_STATS]
        if unknown or not stats:
            raise ValueError(f"sensor {name}: stats must be among {SENSOR_STATS}, got {stats}")
        if window_s <= 0 or buckets < 1:
            raise ValueError(f"sensor {name}: window_s must be > 0 and buckets >= 1")
        for label in labelnames:
            if not _LABEL_RE.match(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} for sensor {name}")
        if len(set(labelnames)) != len(labelnames):
            raise ValueError(f"sensor {name} repeats a label name: {list(labelnames)}")
        self.name = name
        self.help = help
        self.labelnames: tuple[str, ...] = tuple(labelnames)
        self.stats: tuple[str, ...] = tuple(stats)
        self.window_s = window_s
        self._buckets = buckets
        self._clock = clock
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], SensorWindow] = {}

    def metric_names(self) -> list[str]:
        return [f"{self.name}_{stat}" for stat in self.stats]

    def labels(self, *values: object, **named: object) -> SensorWindow:
        """The window for these label values (created on first use)."""
        if values and named:
            raise ValueError(f"sensor {self.name}: give label values by position or by name")
        if named:
            if set(named) != set(self.labelnames):
                raise ValueError(f"sensor {self.name} takes labels {list(self.labelnames)}, "
                                 f"got {sorted(named)}")
            key = tuple(str(named[label]) for label in self.labelnames)
        else:
            if len(values) != len(self.labelnames):
                raise ValueError(f"sensor {self.name} takes labels {list(self.labelnames)}, "
                                 f"got {len(values)}")
            key = tuple(str(value) for value in values)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = SensorWindow(self._clock, self.window_s,
                                                           self._buckets)
            return child

    def _default(self) -> SensorWindow:
        if self.labelnames:
            raise ValueError(
                f"sensor {self.name} has labels {list(self.labelnames)}: use .labels(...) first")
        return self.labels()

    def record(self, value: float = 1.0) -> None:
        self._default().record(value)

    def stats_now(self) -> dict[str, float]:
        return self._default().stats()

    def _families(self) -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
        window = f"{self.window_s:g} s"
        describe = {
            "avg": f"average over the last {window}",
            "max": f"maximum over the last {window}",
            "rate": f"per second over the last {window}",
            "total": "cumulative sum",
        }
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for stat in self.stats:
            name, text = f"{self.name}_{stat}", f"{self.help} ({describe[stat]})"
            kind = CounterMetricFamily if stat == "total" else GaugeMetricFamily
            families[stat] = kind(name, text, labels=self.labelnames)
        return families

    def describe(self) -> Iterator[Metric]:
        """The exposed names, so that the registry refuses a clash at registration."""
        yield from self._families().values()

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        with self._lock:
            children = list(self._children.items())
        for key, child in children:
            values = child.stats()
            for stat, family in families.items():
                family.add_metric(list(key), values[stat])
        yield from families.values()
