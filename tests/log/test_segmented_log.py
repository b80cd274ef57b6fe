"""SegmentedLog on real files and on the simulated disk: the RaftLog contract and the layout."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kraft_spark.log import (
    InvalidAppendError,
    LogError,
    RealFileSystem,
    SegmentedLog,
    SimulatedFileSystem,
)
from kraft_spark.log.codec import encode_batch
from kraft_spark.log.epoch_cache import parse_checkpoint
from kraft_spark.log.fs import FileSystem
from kraft_spark.raft.log_api import OffsetAndEpoch, RaftLog
from kraft_spark.raft.records import Batch
from tests.log.helpers import fill, make_batch

Opener = Callable[..., SegmentedLog]


@pytest.fixture(params=["real", "sim"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[FileSystem, str]]:
    if request.param == "real":
        fs: FileSystem = RealFileSystem()
        yield fs, str(tmp_path / "node")
    else:
        yield SimulatedFileSystem(), "/node"


@pytest.fixture
def open_log(env: tuple[FileSystem, str]) -> Iterator[Opener]:
    fs, log_dir = env
    opened: list[SegmentedLog] = []

    def opener(**kwargs: object) -> SegmentedLog:
        kwargs.setdefault("segment_bytes", 1000)
        kwargs.setdefault("index_interval_bytes", 200)
        log = SegmentedLog.open(fs, log_dir, **kwargs)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield opener
    for log in opened:
        log.close()


def all_batches(log: SegmentedLog) -> list[Batch]:
    return log.read(0, 1 << 30)


def test_satisfies_the_raft_log_protocol(open_log: Opener) -> None:
    log: RaftLog = open_log()
    assert (log.end_offset(), log.last_epoch(), log.flushed_offset()) == (0, 0, 0)
    assert log.read(0, 100) == []
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(0, 0)


def test_append_is_visible_at_once_and_durable_on_flush(open_log: Opener) -> None:
    log = open_log()
    batches = fill(log, [1, 1, 2])
    assert log.end_offset() == 9 and log.last_epoch() == 2
    assert log.flushed_offset() == 0
    assert all_batches(log) == batches
    assert log.flush() == 9 and log.flushed_offset() == 9


def test_group_commit_is_one_fsync_for_many_appends() -> None:
    fs = SimulatedFileSystem()
    log = SegmentedLog.open(fs, "/n")
    fill(log, [1])
    log.flush()
    before = fs.fsync_count
    fill(log, [1] * 50)
    log.flush()
    assert fs.fsync_count - before == 1
    log.close()


def test_appends_must_be_contiguous_and_epochs_monotonic(open_log: Opener) -> None:
    log = open_log()
    fill(log, [3])
    with pytest.raises(InvalidAppendError, match="not the log end offset 3"):
        log.append(make_batch(4, 3))
    with pytest.raises(InvalidAppendError, match="below the log's last epoch 3"):
        log.append(make_batch(3, 2))
    assert log.end_offset() == 3


def test_read_returns_whole_batches_within_max_bytes(open_log: Opener) -> None:
    log = open_log(tail_cache_bytes=0)
    batches = fill(log, [1] * 10)
    size = len(encode_batch(batches[0]))
    assert log.read(0, 1) == batches[:1]  # at least one batch
    assert log.read(0, size * 3) == batches[:3]
    assert log.read(0, size * 3 + size - 1) == batches[:3]
    assert log.read(4, size * 2) == batches[1:3]  # from the batch holding offset 4
    assert log.read(29, 10**6) == batches[9:]
    assert log.read(30, 10**6) == []


def test_tail_cache_and_disk_agree(open_log: Opener) -> None:
    log = open_log(tail_cache_bytes=600)
    batches = fill(log, sorted([1, 1, 2, 2, 2, 3] * 4))
    for start in range(log.end_offset()):
        for max_bytes in (1, 150, 400, 10**6):
            got = log.read(start, max_bytes)
            assert got, (start, max_bytes)
            assert got[0].base_offset <= start < got[0].next_offset
            first = batches.index(got[0])
            assert got == batches[first : first + len(got)]


def test_rolls_segments_by_size_with_kafka_names(
    open_log: Opener, env: tuple[FileSystem, str]
) -> None:
    fs, log_dir = env
    log = open_log(segment_bytes=500)
    batches = fill(log, [1] * 20)
    log.flush()
    paths = log.segment_paths()
    assert len(paths) > 3
    names = [os.path.basename(p) for p in paths]
    assert names[0] == "00000000000000000000.log"
    assert all(len(n) == 24 and n[:20].isdigit() for n in names)
    pdir = os.path.join(log_dir, "__cluster_metadata-0")
    listing = fs.listdir(pdir)
    for name in names[:-1]:  # sealed segments carry an index
        assert name.replace(".log", ".index") in listing
    for path in paths:
        assert fs.size(path) <= 500 or len(fs.read(path)) == len(encode_batch(batches[0]))
    assert all_batches(log) == batches


def test_epoch_queries(open_log: Opener) -> None:
    log = open_log()
    fill(log, [1, 1, 3, 3, 3, 4, 7])  # epochs 1@0, 3@6, 4@15, 7@18; end 21
    assert log.epoch_entries() == [(1, 0), (3, 6), (4, 15), (7, 18)]
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(6, 1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(6, 1)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(15, 3)
    assert log.end_offset_for_epoch(6) == OffsetAndEpoch(18, 4)
    assert log.end_offset_for_epoch(7) == OffsetAndEpoch(21, 7)
    assert log.end_offset_for_epoch(99) == OffsetAndEpoch(21, 7)
    assert [log.epoch_for_offset(o) for o in (0, 5, 6, 14, 15, 20, 21)] == [
        1, 1, 3, 3, 4, 7, None
    ]


def test_truncate_inside_and_across_segments(
    open_log: Opener, env: tuple[FileSystem, str]
) -> None:
    fs, _ = env
    log = open_log(segment_bytes=400)
    batches = fill(log, [1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3])
    log.flush()
    segments_before = len(log.segment_paths())
    log.truncate_to(24)  # inside epoch 3's first batch boundary region
    assert log.end_offset() == 24 and log.last_epoch() == 3
    assert log.flushed_offset() == 24
    log.truncate_to(12)
    assert log.end_offset() == 12
    assert log.epoch_entries() == [(1, 0), (2, 9)]
    assert len(log.segment_paths()) < segments_before
    for path in log.segment_paths()[:-1]:
        assert fs.exists(path.replace(".log", ".index"))
    assert not fs.exists(log.segment_paths()[-1].replace(".log", ".index"))
    assert all_batches(log) == batches[:4]
    replacement = fill(log, [5, 5])
    assert all_batches(log) == batches[:4] + replacement
    assert log.epoch_entries() == [(1, 0), (2, 9), (5, 12)]


def test_truncate_inside_a_batch_cuts_the_whole_batch(open_log: Opener) -> None:
    log = open_log()
    fill(log, [1, 1, 1])
    log.truncate_to(4)
    assert log.end_offset() == 3
    log.truncate_to(50)  # beyond the end: nothing to do
    assert log.end_offset() == 3
    log.truncate_to(0)
    assert (log.end_offset(), log.last_epoch(), log.epoch_entries()) == (0, 0, [])
    fill(log, [4])
    assert log.epoch_entries() == [(4, 0)]


def test_reopen_keeps_everything_flushed(open_log: Opener) -> None:
    log = open_log(segment_bytes=300)
    batches = fill(log, [1, 2, 2, 3, 3, 3, 5, 5])
    log.close()
    again = open_log(segment_bytes=300)
    assert again.end_offset() == batches[-1].next_offset
    assert again.flushed_offset() == again.end_offset()
    assert again.epoch_entries() == [(1, 0), (2, 3), (3, 9), (5, 18)]
    assert all_batches(again) == batches
    for offset in range(again.end_offset()):
        got = again.read(offset, 1)
        assert len(got) == 1 and got[0].base_offset <= offset < got[0].next_offset


def test_epoch_checkpoint_is_kafka_text_and_follows_truncation(
    open_log: Opener, env: tuple[FileSystem, str]
) -> None:
    fs, log_dir = env
    path = os.path.join(log_dir, "__cluster_metadata-0", "leader-epoch-checkpoint")
    log = open_log()
    fill(log, [1, 4, 4, 6])
    log.flush()
    assert fs.read(path) == b"0\n3\n1 0\n4 3\n6 9\n"
    log.truncate_to(9)
    assert parse_checkpoint(fs.read(path)) == [(1, 0), (4, 3)]


def test_closed_log_refuses_work(open_log: Opener) -> None:
    log = open_log()
    log.close()
    with pytest.raises(LogError, match="closed"):
        log.append(make_batch(0, 1))
    log.close()  # idempotent


def test_io_failure_fails_the_log(env: tuple[FileSystem, str]) -> None:
    fs, log_dir = env

    class Failing:
        def __init__(self, inner: FileSystem) -> None:
            self.inner = inner
            self.fail = False

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        def fsync(self, path: str) -> None:
            if self.fail:
                raise OSError(5, "Input/output error")
            self.inner.fsync(path)

    failing = Failing(fs)
    log = SegmentedLog.open(failing, log_dir)  # type: ignore[arg-type]
    fill(log, [1])
    failing.fail = True
    with pytest.raises(LogError, match="flush failed"):
        log.flush()
    with pytest.raises(LogError, match="failed earlier"):
        log.append(make_batch(3, 1))
    log.close()
    again = SegmentedLog.open(fs, log_dir)
    assert again.end_offset() in (0, 3)
    again.close()


def test_matches_a_model_under_random_operations() -> None:
    """Random appends, truncations, flushes, reopens and crashes against a list model."""
    for seed in range(12):
        rng = random.Random(seed)
        fs = SimulatedFileSystem()
        kwargs = {"segment_bytes": rng.choice([200, 700, 5000]), "index_interval_bytes": 150,
                  "tail_cache_bytes": rng.choice([0, 500, 1 << 20])}
        log = SegmentedLog.open(fs, "/n", **kwargs)
        model: list[Batch] = []
        durable = 0
        epoch = 1
        for _ in range(150):
            op = rng.random()
            if op < 0.6:
                epoch += rng.random() < 0.1
                batch = make_batch(log.end_offset(), epoch, rng.randint(1, 5), rng.randint(0, 90))
                log.append(batch)
                model.append(batch)
            elif op < 0.7 and model:
                cut = rng.choice(model).base_offset
                log.truncate_to(cut)
                model = [b for b in model if b.base_offset < cut]
                durable = min(durable, cut)
            elif op < 0.85:
                durable = log.flush()
            elif op < 0.93:
                log.close()
                log = SegmentedLog.open(fs, "/n", **kwargs)
                durable = log.end_offset()
            else:
                fs.crash(rng, torn=rng.random() < 0.5)
                log = SegmentedLog.open(fs, "/n", **kwargs)
                assert log.end_offset() >= durable
                model = model[: len([b for b in model if b.next_offset <= log.end_offset()])]
                durable = log.end_offset()
            assert log.end_offset() == (model[-1].next_offset if model else 0)
            assert log.read(0, 1 << 30) == model, seed
            epochs = sorted({(b.epoch, min(c.base_offset for c in model if c.epoch == b.epoch))
                             for b in model})
            assert log.epoch_entries() == epochs
            epoch = max(epoch, log.last_epoch())
        log.close()


def test_no_file_descriptors_leak(tmp_path: Path) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    log_dir = str(tmp_path / "n")
    with SegmentedLog.open(RealFileSystem(), log_dir, segment_bytes=300) as log:
        fill(log, [1, 1, 2, 2])
    before = open_fds()
    for _ in range(5):
        with SegmentedLog.open(RealFileSystem(), log_dir, segment_bytes=300) as log:
            log.read(0, 1 << 20)
            fill(log, [3])
            log.truncate_to(log.end_offset() - 3)
            log.write_quorum_state({"clusterId": "c", "leaderId": 1, "leaderEpoch": 3,
                                   "votedId": -1, "appliedOffset": 0, "currentVoters": []})
            log.read_quorum_state()
    assert open_fds() == before


# -- the log start (KIP-630) ----------------------------------------------------------------


def _filled(tmp_path: Path, n: int) -> SegmentedLog:
    from kraft_spark.log.fs import RealFileSystem
    from kraft_spark.raft.records import Batch, Record

    log = SegmentedLog.open(RealFileSystem(), str(tmp_path), segment_bytes=1024)
    for i in range(n):
        epoch = 1 + i // 40
        log.append(Batch(i, epoch, (Record(b"k%d" % i, b"v" * 50, timestamp_ms=1000 + i),)))
    log.flush()
    return log


def test_advancing_the_log_start_deletes_whole_segments_and_persists(tmp_path: Path) -> None:
    from kraft_spark.log.fs import RealFileSystem

    log = _filled(tmp_path, 100)
    spans = log.segment_spans()
    assert len(spans) > 4 and spans[0][0] == 0 and spans[-1][1] == 100
    start = spans[3][1] + 1  # one record into the fifth segment
    assert log.advance_start_offset(start) == start
    assert log.segment_spans()[0][0] == spans[4][0]  # four whole segments deleted
    assert log.start_offset() == start and log.end_offset() == 100
    assert log.read(start, 1 << 20)[0].base_offset == start
    assert log.epoch_entries()[0] == (1 + start // 40, start)
    assert log.advance_start_offset(3) == start  # never backwards
    with pytest.raises(ValueError, match="beyond the log end"):
        log.advance_start_offset(101)
    log.close()
    reopened = SegmentedLog.open(RealFileSystem(), str(tmp_path), segment_bytes=1024)
    assert (reopened.start_offset(), reopened.end_offset()) == (start, 100)
    assert (tmp_path / "log-start-offset-checkpoint").read_text().endswith(f" 0 {start}\n")
    assert reopened.end_offset_for_epoch(3).epoch == 3
    reopened.close()


def test_truncate_fully_to_restarts_an_empty_log_at_an_offset(tmp_path: Path) -> None:
    from kraft_spark.log.fs import RealFileSystem
    from kraft_spark.raft.records import Batch, Record

    log = _filled(tmp_path, 30)
    log.truncate_fully_to(500)
    assert (log.start_offset(), log.end_offset(), log.last_epoch()) == (500, 500, 0)
    log.append(Batch(500, 7, (Record(b"a", b"b"),)))
    log.flush()
    log.close()
    reopened = SegmentedLog.open(RealFileSystem(), str(tmp_path), segment_bytes=1024)
    assert (reopened.start_offset(), reopened.end_offset(), reopened.last_epoch()) == (500, 501, 7)
    assert reopened.read(500, 100)[0].records[0].key == b"a"
    reopened.close()


def test_a_new_epoch_can_start_where_the_log_start_was_moved_to_the_end(tmp_path: Path) -> None:
    """Retention up to the log end leaves an epoch entry with no record; the next leader's
    first batch (a later epoch, same offset) replaces it (the simulator found this)."""
    from kraft_spark.log.fs import RealFileSystem
    from kraft_spark.raft.records import Batch, Record

    log = _filled(tmp_path, 50)
    log.advance_start_offset(50)
    assert (log.start_offset(), log.end_offset()) == (50, 50)
    log.append(Batch(50, 9, (Record(b"k", b"v"),)))
    log.flush()
    assert log.epoch_entries() == [(9, 50)]
    log.close()
    reopened = SegmentedLog.open(RealFileSystem(), str(tmp_path), segment_bytes=1024)
    assert reopened.read(0, 1 << 20)[0].base_offset == 50
    assert reopened.epoch_entries() == [(9, 50)]
    reopened.close()
