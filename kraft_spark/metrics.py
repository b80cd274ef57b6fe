"""A tiny metrics registry rendering the Prometheus text exposition format 0.0.4 (no dependencies).

Three kinds of metric, each a family of labelled children:

* :class:`Gauge`: a value that is set, or read from a callback at scrape time.
* :class:`Counter`: a value that only goes up.
* :class:`Sensor`: Kafka-style statistics over a sliding window (default 30 s, kept as 30 buckets
  of 1 s so memory is bounded whatever the rate): ``<name>_avg`` and ``<name>_max`` of the values
  recorded in the window (NaN while the window is empty, as Kafka reports), ``<name>_rate`` =
  their sum per second, and ``<name>_total`` = the cumulative sum since creation.

Names (SPEC §9): Kafka's raft metrics (group ``raft-metrics``) are exported as
``kafka_raft_<name with - replaced by _>`` (:func:`raft_metric_name`), e.g. ``commit-latency-avg``
→ ``kafka_raft_commit_latency_avg``; the application's own metrics start with ``kraft_spark_``
(:func:`app_metric_name`). :class:`RaftMetrics` and :class:`AppMetrics` register them all.

Thread-safe: values may be recorded from any thread while another renders.

Example::

    registry = Registry(const_labels={"node_id": "1"})
    raft = RaftMetrics(registry)
    raft.high_watermark.set(42)
    raft.commit_latency.record(3.5)       # kafka_raft_commit_latency_avg / _max
    text = registry.render()
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Generic, TypeVar

__all__ = [
    "CONTENT_TYPE",
    "AppMetrics",
    "Counter",
    "Gauge",
    "HttpMetrics",
    "RaftMetrics",
    "Registry",
    "Sensor",
    "app_metric_name",
    "raft_metric_name",
]

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
RAFT_PREFIX: Final = "kafka_raft_"
APP_PREFIX: Final = "kraft_spark_"

_NAME_RE: Final = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_RE: Final = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
SENSOR_STATS: Final = ("avg", "max", "rate", "total")

Clock = Callable[[], float]


def raft_metric_name(kafka_name: str) -> str:
    """``commit-latency-avg`` → ``kafka_raft_commit_latency_avg``."""
    return RAFT_PREFIX + kafka_name.replace("-", "_")


def app_metric_name(name: str) -> str:
    """``http-request-latency-ms`` → ``kraft_spark_http_request_latency_ms``."""
    return APP_PREFIX + name.replace("-", "_")


def _format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _check_name(name: str) -> None:
    if not _NAME_RE.match(name):
        raise ValueError(f"invalid metric name {name!r}: use letters, digits, '_' and ':'")


def _label_block(pairs: Sequence[tuple[str, str]]) -> str:
    if not pairs:
        return ""
    inner = ",".join(f'{name}="{_escape_label_value(value)}"' for name, value in pairs)
    return "{" + inner + "}"


C = TypeVar("C")


class _Family(Generic[C]):
    """A named metric with fixed label names; one child per combination of label values."""

    kind: str = ""

    def __init__(
        self, name: str, help: str, labelnames: Sequence[str], const_labels: Mapping[str, str]
    ) -> None:
        _check_name(name)
        for label in labelnames:
            if not _LABEL_RE.match(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} for metric {name}")
        if len(set(labelnames)) != len(labelnames):
            raise ValueError(f"metric {name} repeats a label name: {list(labelnames)}")
        clash = set(labelnames) & set(const_labels)
        if clash:
            raise ValueError(
                f"metric {name} label(s) {sorted(clash)} clash with the registry's const labels"
            )
        self.name = name
        self.help = help
        self.labelnames: tuple[str, ...] = tuple(labelnames)
        self._const = tuple(const_labels.items())
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], C] = {}

    def _new_child(self) -> C:
        raise NotImplementedError

    def labels(self, *values: object, **named: object) -> C:
        """The child for these label values (created on first use)."""
        if values and named:
            raise ValueError(f"metric {self.name}: give label values by position or by name")
        if named:
            if set(named) != set(self.labelnames):
                raise ValueError(
                    f"metric {self.name} takes labels {list(self.labelnames)}, got {sorted(named)}"
                )
            key = tuple(str(named[label]) for label in self.labelnames)
        else:
            if len(values) != len(self.labelnames):
                raise ValueError(
                    f"metric {self.name} takes labels {list(self.labelnames)}, got {len(values)}"
                )
            key = tuple(str(value) for value in values)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._new_child()
            return child

    def _default(self) -> C:
        if self.labelnames:
            raise ValueError(
                f"metric {self.name} has labels {list(self.labelnames)}: use .labels(...) first"
            )
        return self.labels()

    def _snapshot(self) -> list[tuple[tuple[tuple[str, str], ...], C]]:
        with self._lock:
            items = list(self._children.items())
        return [
            (self._const + tuple(zip(self.labelnames, key, strict=True)), child)
            for key, child in items
        ]

    def render(self) -> Iterable[str]:
        raise NotImplementedError


class GaugeChild:
    __slots__ = ("_fn", "_lock", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: float = 0
        self._fn: Callable[[], float] | None = None

    def set(self, value: float) -> None:
        with self._lock:
            self._value = value
            self._fn = None

    def inc(self, amount: float = 1) -> None:
        with self._lock:
            self._value += amount

    def dec(self, amount: float = 1) -> None:
        with self._lock:
            self._value -= amount

    def set_function(self, fn: Callable[[], float]) -> None:
        """Read the value from ``fn`` at every scrape (NaN if it raises)."""
        with self._lock:
            self._fn = fn

    @property
    def value(self) -> float:
        fn = self._fn
        if fn is None:
            return self._value
        try:
            return fn()
        except Exception:
            return math.nan


class Gauge(_Family[GaugeChild]):
    kind = "gauge"

    def _new_child(self) -> GaugeChild:
        return GaugeChild()

    def set(self, value: float) -> None:
        self._default().set(value)

    def inc(self, amount: float = 1) -> None:
        self._default().inc(amount)

    def dec(self, amount: float = 1) -> None:
        self._default().dec(amount)

    def set_function(self, fn: Callable[[], float]) -> None:
        self._default().set_function(fn)

    @property
    def value(self) -> float:
        return self._default().value

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {_escape_help(self.help)}"
        yield f"# TYPE {self.name} gauge"
        for labels, child in self._snapshot():
            yield f"{self.name}{_label_block(labels)} {_format_value(child.value)}"


class CounterChild:
    __slots__ = ("_lock", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: float = 0

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up: cannot add {amount}")
        with self._lock:
            self._value += amount

    @property
    def value(self) -> float:
        return self._value


class Counter(_Family[CounterChild]):
    """By Prometheus convention name counters ``..._total``."""

    kind = "counter"

    def _new_child(self) -> CounterChild:
        return CounterChild()

    def inc(self, amount: float = 1) -> None:
        self._default().inc(amount)

    @property
    def value(self) -> float:
        return self._default().value

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {_escape_help(self.help)}"
        yield f"# TYPE {self.name} counter"
        for labels, child in self._snapshot():
            yield f"{self.name}{_label_block(labels)} {_format_value(child.value)}"


class _Bucket:
    __slots__ = ("count", "index", "max", "sum")

    def __init__(self, index: int) -> None:
        self.index = index
        self.count = 0
        self.sum = 0.0
        self.max = -math.inf


class SensorChild:
    """Values recorded into a sliding window of ``buckets`` buckets covering ``window_s``."""

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


class Sensor(_Family[SensorChild]):
    """Exposes one Prometheus metric per stat: ``<name>_<stat>``."""

    kind = "sensor"

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str],
        const_labels: Mapping[str, str],
        *,
        stats: Sequence[str],
        window_s: float,
        buckets: int,
        clock: Clock,
    ) -> None:
        super().__init__(name, help, labelnames, const_labels)
        unknown = [s for s in stats if s not in SENSOR_STATS]
        if unknown or not stats:
            raise ValueError(f"sensor {name}: stats must be among {SENSOR_STATS}, got {stats}")
        if window_s <= 0 or buckets < 1:
            raise ValueError(f"sensor {name}: window_s must be > 0 and buckets >= 1")
        self.stats: tuple[str, ...] = tuple(stats)
        self.window_s = window_s
        self._buckets = buckets
        self._clock = clock

    def metric_names(self) -> list[str]:
        return [f"{self.name}_{stat}" for stat in self.stats]

    def _new_child(self) -> SensorChild:
        return SensorChild(self._clock, self.window_s, self._buckets)

    def record(self, value: float = 1.0) -> None:
        self._default().record(value)

    def stats_now(self) -> dict[str, float]:
        return self._default().stats()

    def render(self) -> Iterable[str]:
        samples = [(labels, child.stats()) for labels, child in self._snapshot()]
        window = f"{self.window_s:g} s"
        describe = {
            "avg": f"average over the last {window}",
            "max": f"maximum over the last {window}",
            "rate": f"per second over the last {window}",
            "total": "cumulative sum",
        }
        for stat in self.stats:
            name = f"{self.name}_{stat}"
            kind = "counter" if stat == "total" else "gauge"
            yield f"# HELP {name} {_escape_help(self.help)} ({describe[stat]})"
            yield f"# TYPE {name} {kind}"
            for labels, values in samples:
                yield f"{name}{_label_block(labels)} {_format_value(values[stat])}"


_F = TypeVar("_F", bound=_Family[Any])


class Registry:
    """Holds metric families in registration order and renders them.

    ``const_labels`` are added to every sample (e.g. ``{"node_id": "1"}``); ``clock`` (seconds,
    monotonic) drives sensor windows and can be injected in tests.
    """

    def __init__(
        self, *, clock: Clock = time.monotonic, const_labels: Mapping[str, str] | None = None
    ) -> None:
        self._clock = clock
        self._const: dict[str, str] = {}
        for label, value in (const_labels or {}).items():
            if not _LABEL_RE.match(label):
                raise ValueError(f"invalid const label name {label!r}")
            self._const[label] = str(value)
        self._lock = threading.Lock()
        self._families: dict[str, _Family[Any]] = {}
        self._exposed: dict[str, str] = {}  # every exposed sample name → its family's name

    def _register(self, family: _F, exposed: Sequence[str], exist_ok: bool) -> _F:
        with self._lock:
            existing = self._families.get(family.name)
            if existing is not None:
                same = (
                    type(existing) is type(family)
                    and existing.labelnames == family.labelnames
                    and (
                        not isinstance(existing, Sensor)
                        or (isinstance(family, Sensor) and existing.stats == family.stats)
                    )
                )
                if exist_ok and same:
                    return existing  # type: ignore[return-value]
                raise ValueError(f"metric {family.name} is already registered")
            for name in exposed:
                if name in self._exposed:
                    raise ValueError(
                        f"metric name {name} is already exposed by {self._exposed[name]}"
                    )
            self._families[family.name] = family
            for name in exposed:
                self._exposed[name] = family.name
            return family

    def gauge(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        *,
        fn: Callable[[], float] | None = None,
        exist_ok: bool = False,
    ) -> Gauge:
        """A gauge; with ``fn`` (and no labels) its value is read from ``fn`` at each scrape."""
        gauge = self._register(Gauge(name, help, labelnames, self._const), [name], exist_ok)
        if fn is not None:
            gauge.set_function(fn)
        return gauge

    def counter(
        self, name: str, help: str, labelnames: Sequence[str] = (), *, exist_ok: bool = False
    ) -> Counter:
        return self._register(Counter(name, help, labelnames, self._const), [name], exist_ok)

    def sensor(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        *,
        stats: Sequence[str] = ("avg", "max"),
        window_s: float = 30.0,
        buckets: int = 30,
        exist_ok: bool = False,
    ) -> Sensor:
        """A sensor exposing ``<name>_<stat>`` for each of ``stats`` (avg, max, rate, total)."""
        sensor = Sensor(
            name,
            help,
            labelnames,
            self._const,
            stats=stats,
            window_s=window_s,
            buckets=buckets,
            clock=self._clock,
        )
        return self._register(sensor, sensor.metric_names(), exist_ok)

    def get(self, name: str) -> Gauge | Counter | Sensor | None:
        """The family registered under ``name`` (a sensor's base name), if any."""
        with self._lock:
            family = self._families.get(name)
        if isinstance(family, Gauge | Counter | Sensor):
            return family
        return None

    def render(self) -> str:
        """The whole registry in the text exposition format 0.0.4 (ends with a newline)."""
        with self._lock:
            families = list(self._families.values())
        lines: list[str] = []
        for family in families:
            lines.extend(family.render())
        return "\n".join(lines) + "\n" if lines else ""


# Kafka's ``current-state`` values; exported as a state set: one sample per state, 1 for the
# current one.
RAFT_STATES: Final = (
    "leader", "candidate", "voted", "follower", "unattached", "observer", "resigned"
)


class RaftMetrics:
    """Kafka's ``raft-metrics`` group (SPEC §9), one node's children.

    Give ``labels`` (e.g. ``{"node_id": "1"}``) when several nodes share a registry; several
    instances with the same label names share the families.
    """

    def __init__(self, registry: Registry, labels: Mapping[str, object] | None = None) -> None:
        labels = dict(labels or {})
        names = tuple(labels)

        def gauge(kafka_name: str, help: str) -> GaugeChild:
            family = registry.gauge(raft_metric_name(kafka_name), help, names, exist_ok=True)
            return family.labels(**labels)

        def sensor(kafka_name: str, help: str, stats: Sequence[str]) -> SensorChild:
            family = registry.sensor(
                raft_metric_name(kafka_name), help, names, stats=stats, exist_ok=True
            )
            return family.labels(**labels)

        state = registry.gauge(
            raft_metric_name("current-state"),
            "The current state of this member: 1 for the state it is in, 0 for the others.",
            (*names, "state"),
            exist_ok=True,
        )
        self._state = {s: state.labels(**labels, state=s) for s in RAFT_STATES}
        self.current_leader = gauge(
            "current-leader", "The current quorum leader's id; -1 indicates unknown."
        )
        self.current_vote = gauge(
            "current-vote", "The current voted leader's id; -1 indicates not voted for anyone."
        )
        self.current_epoch = gauge("current-epoch", "The current quorum epoch.")
        self.high_watermark = gauge(
            "high-watermark", "The high watermark maintained on this member; -1 if it is unknown."
        )
        self.log_end_offset = gauge("log-end-offset", "The current raft log end offset.")
        self.log_end_epoch = gauge("log-end-epoch", "The current raft log end epoch.")
        self.number_unknown_voter_connections = gauge(
            "number-unknown-voter-connections",
            "Number of unknown voters whose connection information is not cached.",
        )
        self.boot_timestamp = gauge(
            "boot-timestamp", "The wall-clock time in milliseconds when this member started."
        )
        self.election_latency = sensor(
            "election-latency",
            "The time in milliseconds to elect a new leader.",
            ("avg", "max"),
        )
        self.commit_latency = sensor(
            "commit-latency",
            "The time in milliseconds to commit an entry in the raft log.",
            ("avg", "max"),
        )
        self.fetch_records = sensor(
            "fetch-records", "The number of records fetched from the leader.", ("rate",)
        )
        self.append_records = sensor(
            "append-records", "The number of records appended to the log.", ("rate",)
        )
        self.poll_idle_ratio = sensor(
            "poll-idle-ratio",
            "The ratio of time the raft io thread is idle (0 to 1).",
            ("avg",),
        )
        for child in (self.current_leader, self.current_vote, self.high_watermark):
            child.set(-1)
        self.set_state("unattached")

    def set_state(self, state: str) -> None:
        """Mark ``state`` (one of :data:`RAFT_STATES`) as the current one."""
        if state not in self._state:
            raise ValueError(f"unknown raft state {state!r}: expected one of {RAFT_STATES}")
        for name, child in self._state.items():
            child.set(1 if name == state else 0)


class AppMetrics:
    """The application's own metrics (SPEC §9), prefixed ``kraft_spark_``."""

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
        self.delta_commits = registry.counter(
            app_metric_name("delta-commits-total"),
            "Materializer commits to each Delta table, by table.",
            ("table",),
            exist_ok=True,
        )
        self.delta_compactions = registry.counter(
            app_metric_name("delta-compactions-total"),
            "Compactions (OPTIMIZE) of a Delta table by the driver, by table.",
            ("table",),
            exist_ok=True,
        )
        self.delta_compacted_files = registry.counter(
            app_metric_name("delta-compacted-files-total"),
            "Small data files replaced by compactions, by table.",
            ("table",),
            exist_ok=True,
        )
        self.delta_compaction_failures = registry.counter(
            app_metric_name("delta-compaction-failures-total"),
            "Compactions that failed (retried at the next cycle), by table.",
            ("table",),
            exist_ok=True,
        )


class HttpMetrics:
    """HTTP sidecar request metrics, recorded by its middleware."""

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
