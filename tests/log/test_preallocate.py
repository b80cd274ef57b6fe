"""Preallocated segments on a real disk: reserved while open, trimmed when sealed or closed, and a
reserved tail left by a killed process dropped quietly while damage inside it is still cut."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kraft_spark.log import RealFileSystem, SegmentedLog
from kraft_spark.log.codec import iter_batches
from kraft_spark.raft.records import Batch
from tests.log.helpers import fill, make_batch

SEGMENT_BYTES = 4096
REPO = Path(__file__).resolve().parents[2]


def open_log(log_dir: str, preallocate: bool = True) -> SegmentedLog:
    return SegmentedLog.open(
        RealFileSystem(), log_dir, segment_bytes=SEGMENT_BYTES, preallocate=preallocate
    )


def whole_batches(path: str) -> int:
    """Batches in the file; fails unless the file holds whole batches and nothing after them."""
    return sum(1 for _ in iter_batches(Path(path).read_bytes()))


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_segments_are_reserved_while_open_and_trimmed_when_sealed_or_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_dir = str(tmp_path / "node")
    caplog.set_level(logging.INFO, logger="kraft_spark.log")
    with open_log(log_dir) as log:
        batches = fill(log, [1, 1, 2])
        log.flush()
        active = log.segment_paths()[-1]
        assert os.path.getsize(active) == SEGMENT_BYTES
        assert log.read(0, 1 << 20) == batches
        while len(log.segment_paths()) < 3:
            batches += fill(log, [2])
        log.flush()
        for sealed in log.segment_paths()[:-1]:
            assert os.path.getsize(sealed) < SEGMENT_BYTES
            assert whole_batches(sealed) > 0
        active = log.segment_paths()[-1]
        assert os.path.getsize(active) == SEGMENT_BYTES
    assert whole_batches(active) > 0  # closing trimmed the reservation
    with open_log(log_dir) as log:
        assert log.read(0, 1 << 20) == batches
    assert warnings(caplog) == []


KILLED_WRITER = """
import os, sys
sys.path.insert(0, {repo!r})
from kraft_spark.log import RealFileSystem, SegmentedLog
from tests.log.helpers import fill
log = SegmentedLog.open(RealFileSystem(), {log_dir!r}, segment_bytes={segment_bytes},
                        preallocate=True)
fill(log, [1, 1, 2, 2])
log.flush()
os._exit(0)  # no close: the reserved tail stays, as after kill -9
"""


def killed_log(tmp_path: Path) -> tuple[str, list[Batch], str]:
    """A log directory left by a killed writer: (directory, its batches, its one segment)."""
    log_dir = str(tmp_path / "node")
    expected = killed_writer_leaves(log_dir)
    (segment,) = (str(p) for p in (Path(log_dir) / "__cluster_metadata-0").glob("*.log"))
    return log_dir, expected, segment


def killed_writer_leaves(log_dir: str) -> list[Batch]:
    """Run a process that appends four batches, flushes and dies without closing its log."""
    script = textwrap.dedent(KILLED_WRITER).format(
        repo=str(REPO), log_dir=log_dir, segment_bytes=SEGMENT_BYTES
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    expected, offset = [], 0
    for epoch in (1, 1, 2, 2):
        expected.append(make_batch(offset, epoch))
        offset = expected[-1].next_offset
    return expected


def test_a_killed_writer_leaves_a_reserved_tail_that_recovery_drops_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_dir, expected, segment = killed_log(tmp_path)
    assert os.path.getsize(segment) == SEGMENT_BYTES
    caplog.set_level(logging.INFO, logger="kraft_spark.log")
    with open_log(log_dir) as log:
        assert log.read(0, 1 << 20) == expected
        assert log.end_offset() == expected[-1].next_offset
    assert warnings(caplog) == []
    assert any("preallocated tail" in r.getMessage() for r in caplog.records)
    assert whole_batches(segment) == len(expected)


def test_a_torn_write_inside_the_reserved_tail_is_cut_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_dir, expected, segment = killed_log(tmp_path)
    end = _data_end(segment)
    with open(segment, "r+b") as f:  # the first bytes of a fifth batch, then the power went
        f.seek(end)
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00\x40\xff\xff")
    assert os.path.getsize(segment) == SEGMENT_BYTES
    caplog.set_level(logging.WARNING, logger="kraft_spark.log")
    with open_log(log_dir) as log:
        assert log.read(0, 1 << 20) == expected
    (message,) = warnings(caplog)
    assert "truncating" in message and f"position {end}" in message


def test_a_reserved_tail_reopened_without_preallocation_is_cut_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Turning preallocation off after a crash loses nothing; the tail is then just not known to
    be a reservation, so it is cut with a warning like any other unexpected tail."""
    log_dir = str(tmp_path / "node")
    expected = killed_writer_leaves(log_dir)
    caplog.set_level(logging.WARNING, logger="kraft_spark.log")
    with open_log(log_dir, preallocate=False) as log:
        assert log.read(0, 1 << 20) == expected
        log.append(make_batch(log.end_offset(), 3))
    assert any("truncating" in m for m in warnings(caplog))


def _data_end(path: str) -> int:
    data = Path(path).read_bytes()
    pos = 0
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos + 8 : pos + 12], "big")
        if length == 0:
            return pos
        pos += 12 + length
    raise AssertionError(f"{path}: no zero tail found")
