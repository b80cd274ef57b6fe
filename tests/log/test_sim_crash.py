"""SegmentedLog on the simulated disk: unsynced writes are lost, torn tails are cut, and a crash
at any file-system call leaves a log that keeps everything flushed and serves only a prefix of
what was written."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import pytest

from kraft_spark.log import LogError, SegmentedLog, SimulatedFileSystem
from kraft_spark.log.codec import encode_batch
from kraft_spark.raft.records import Batch
from tests.log.helpers import make_batch

OPTIONS = {"segment_bytes": 600, "index_interval_bytes": 150}


def test_unsynced_appends_are_lost() -> None:
    fs = SimulatedFileSystem()
    log = SegmentedLog.open(fs, "/n", **OPTIONS)
    kept = [make_batch(0, 1), make_batch(3, 1)]
    for batch in kept:
        log.append(batch)
    assert log.flush() == 6
    log.append(make_batch(6, 2))
    fs.crash(random.Random(0))
    log = SegmentedLog.open(fs, "/n", **OPTIONS)
    assert log.end_offset() == 6 and log.last_epoch() == 1
    assert log.read(0, 1 << 20) == kept
    assert log.epoch_entries() == [(1, 0)]


def test_a_log_object_from_before_a_crash_refuses_to_work() -> None:
    fs = SimulatedFileSystem()
    stale = SegmentedLog.open(fs, "/n")
    stale.append(make_batch(0, 1))
    fs.crash(random.Random(0))
    with pytest.raises(LogError, match="lost its directory lock"):
        stale.append(make_batch(3, 1))
    with pytest.raises(LogError, match="lost its directory lock"):
        stale.read(0, 100)
    stale.close()  # no flush: the disk is not its own any more
    fresh = SegmentedLog.open(fs, "/n")
    assert fresh.end_offset() == 0
    fresh.close()


def test_torn_tail_is_cut_on_open(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    first = make_batch(0, 1, value_size=50)
    cuts = 0
    for seed in range(20):
        fs = SimulatedFileSystem()
        log = SegmentedLog.open(fs, "/n")
        log.append(first)
        log.flush()
        log.append(make_batch(3, 1, count=2, value_size=200))
        caplog.clear()
        fs.crash(random.Random(seed), torn=True)
        log = SegmentedLog.open(fs, "/n")
        assert log.read(0, 1 << 20) == [first]
        segment = log.segment_paths()[-1]
        assert fs.size(segment) == len(encode_batch(first))
        messages = [r.getMessage() for r in caplog.records if "truncating" in r.getMessage()]
        if messages:
            cuts += 1
            assert segment in messages[0]
            assert f"position {len(encode_batch(first))} (offset 3)" in messages[0]
        log.close()
    assert cuts >= 15  # a torn prefix of 0 bytes leaves nothing to cut


class _Crash(Exception):
    pass


class CrashAfter:
    """The simulated disk, losing power at its n-th mutating call (fsyncs included)."""

    MUTATING = frozenset({"append", "write_file", "truncate", "fsync", "fsync_dir", "rename",
                          "remove"})

    def __init__(self, inner: SimulatedFileSystem, n: int) -> None:
        self.inner = inner
        self.remaining = n
        self.calls = 0

    def __getattr__(self, name: str) -> object:
        attr = getattr(self.inner, name)
        if name not in self.MUTATING:
            return attr

        def call(*args: object) -> object:
            if self.remaining == 0:
                raise _Crash
            self.remaining -= 1
            self.calls += 1
            return attr(*args)

        return call


Step = tuple[str, int]
WORKLOAD: list[Step] = [
    ("append", 1), ("append", 1), ("flush", 0), ("append", 2), ("append", 2), ("append", 2),
    ("flush", 0), ("append", 2), ("truncate", 9), ("append", 4), ("append", 4), ("append", 4),
    ("flush", 0), ("truncate", 3), ("append", 5), ("flush", 0), ("append", 5), ("append", 6),
    ("flush", 0),
]


def _run(
    log: SegmentedLog, step: Step, model: list[Batch]
) -> tuple[list[Batch], Callable[[int], int]]:
    """Apply one step; return the model after it and how it moves the durable offset."""
    kind, arg = step
    if kind == "append":
        batch = make_batch(log.end_offset(), arg, count=3, value_size=60)
        new_model = [*model, batch]
        log.append(batch)
        return new_model, lambda durable: durable
    if kind == "truncate":
        new_model = [b for b in model if b.base_offset < arg]
        log.truncate_to(arg)
        return new_model, lambda durable: min(durable, arg)
    end = model[-1].next_offset if model else 0
    log.flush()
    return model, lambda durable: end


def _end(batches: list[Batch]) -> int:
    return batches[-1].next_offset if batches else 0


def _is_prefix(short: list[Batch], long: list[Batch]) -> bool:
    return long[: len(short)] == short


def test_a_crash_at_any_file_system_call_keeps_the_log_consistent() -> None:
    # Count the mutating calls of a crash-free run first.
    probe = CrashAfter(SimulatedFileSystem(), -1)
    log = SegmentedLog.open(probe, "/n", **OPTIONS)  # type: ignore[arg-type]
    model: list[Batch] = []
    for step in WORKLOAD:
        model, _ = _run(log, step, model)
    total = probe.calls
    assert total > 40

    checked = 0
    for n in range(total + 1):
        for torn in (False, True):
            fs = SimulatedFileSystem()
            crashing = CrashAfter(fs, n)
            model, durable = [], 0
            allowed: list[tuple[list[Batch], int]] = []
            try:
                log = SegmentedLog.open(crashing, "/n", **OPTIONS)  # type: ignore[arg-type]
                for step in WORKLOAD:
                    before, durable_before = model, durable
                    try:
                        model, advance = _run(log, step, model)
                    except _Crash:
                        new_model = [b for b in before if b.base_offset < step[1]] \
                            if step[0] == "truncate" else before
                        allowed = [(before, durable_before),
                                   (new_model, min(durable_before, _end(new_model)))]
                        raise
                    durable = advance(durable)
                allowed = [(model, durable)]
            except _Crash:
                pass
            if not allowed:  # crashed while opening: nothing was ever written
                allowed = [([], 0)]
            fs.crash(random.Random(n), torn=torn)
            recovered_log = SegmentedLog.open(fs, "/n", **OPTIONS)
            recovered = recovered_log.read(0, 1 << 30)
            assert recovered_log.end_offset() == _end(recovered)
            assert any(
                _is_prefix(recovered, candidate) and _end(recovered) >= need
                for candidate, need in allowed
            ), (n, torn, _end(recovered), [(_end(c), d) for c, d in allowed])
            epochs: list[tuple[int, int]] = []
            for batch in recovered:
                if not epochs or epochs[-1][0] != batch.epoch:
                    epochs.append((batch.epoch, batch.base_offset))
            assert recovered_log.epoch_entries() == epochs, (n, torn)
            recovered_log.close()
            checked += 1
    assert checked == 2 * (total + 1)
