"""Opening damaged directories: torn tails, flipped bits, lost index or epoch files."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from kraft_spark.log import CorruptRecordError, LogError, RealFileSystem, SegmentedLog
from kraft_spark.log.codec import encode_batch
from kraft_spark.raft.records import Batch
from tests.log.helpers import fill

EPOCHS = [1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 4, 4]


def build(tmp_path: Path, segment_bytes: int = 400) -> tuple[str, list[Batch], list[str]]:
    log_dir = str(tmp_path / "node")
    with SegmentedLog.open(RealFileSystem(), log_dir, segment_bytes=segment_bytes,
                           index_interval_bytes=150) as log:
        batches = fill(log, EPOCHS)
        paths = log.segment_paths()
    assert len(paths) >= 3
    return log_dir, batches, paths


def reopen(log_dir: str, segment_bytes: int = 400) -> SegmentedLog:
    return SegmentedLog.open(RealFileSystem(), log_dir, segment_bytes=segment_bytes,
                             index_interval_bytes=150)


def flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x10]))


def batches_in(path: str) -> int:
    return sum(1 for _ in _positions(path))


def _positions(path: str) -> list[int]:
    data = Path(path).read_bytes()
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
    return out


def test_clean_reopen_changes_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log_dir, batches, _ = build(tmp_path)
    caplog.set_level(logging.INFO)
    with reopen(log_dir) as log:
        assert log.read(0, 1 << 20) == batches
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("cut", [1, 11, 12, 40, 61, 70])
def test_torn_last_batch_is_cut_with_a_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cut: int
) -> None:
    log_dir, batches, paths = build(tmp_path)
    last = paths[-1]
    positions = _positions(last)
    size = os.path.getsize(last)
    with open(last, "r+b") as f:
        f.truncate(positions[-1] + cut)  # the last batch is now partial
    lost = batches[-1]
    caplog.set_level(logging.WARNING)
    with reopen(log_dir) as log:
        assert log.end_offset() == lost.base_offset
        assert log.read(0, 1 << 20) == batches[:-1]
        assert log.epoch_entries()[-1][1] <= log.end_offset()
    assert os.path.getsize(last) == positions[-1] < size
    message = caplog.records[-1].getMessage()
    assert last in message and f"position {positions[-1]}" in message
    assert f"offset {lost.base_offset}" in message


def test_garbage_after_the_last_batch_is_cut(tmp_path: Path) -> None:
    log_dir, batches, paths = build(tmp_path)
    with open(paths[-1], "ab") as f:
        f.write(b"\x00" * 7 + b"garbage" * 20)
    with reopen(log_dir) as log:
        assert log.read(0, 1 << 20) == batches
        fill(log, [4])  # and the log goes on where the good data ended
    with reopen(log_dir) as log:
        assert len(log.read(0, 1 << 20)) == len(batches) + 1


def test_flipped_bit_in_the_last_segment_cuts_from_that_batch(tmp_path: Path) -> None:
    log_dir, batches, paths = build(tmp_path)
    last = paths[-1]
    positions = _positions(last)
    assert len(positions) >= 2
    flip(last, positions[0] + 70)  # inside the first batch's records
    first_lost = next(b for b in batches if b.base_offset == int(os.path.basename(last)[:20]))
    with reopen(log_dir) as log:
        assert log.end_offset() == first_lost.base_offset
        assert log.read(0, 1 << 20) == batches[: batches.index(first_lost)]


def test_flipped_bit_in_a_sealed_segment_is_never_served(tmp_path: Path) -> None:
    """Recovery trusts sealed segments' indexes; the read path still checks every CRC."""
    log_dir, batches, paths = build(tmp_path, segment_bytes=1200)
    sealed = paths[1]
    positions = _positions(sealed)
    assert len(positions) >= 4
    flip(sealed, positions[0] + 65)
    base = int(os.path.basename(sealed)[:20])
    with reopen(log_dir, segment_bytes=1200) as log:
        with pytest.raises(CorruptRecordError) as info:
            log.read(base, 1 << 20)
        assert sealed in str(info.value) and f"offset {base}" in str(info.value)
        assert "position 0" in str(info.value)
        assert log.read(0, 1) == batches[:1]  # what is intact is still served


def test_flipped_bit_in_the_tail_of_a_sealed_segment_cuts_the_log_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_dir, batches, paths = build(tmp_path)
    sealed = paths[1]
    positions = _positions(sealed)
    flip(sealed, positions[-1] + 70)
    caplog.set_level(logging.WARNING)
    with reopen(log_dir) as log:
        survivors = [b for b in batches if b.next_offset <= log.end_offset()]
        assert log.read(0, 1 << 20) == survivors
        assert log.segment_paths() == paths[:2]
    assert not os.path.exists(paths[2])
    assert any("removing" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("damage", ["missing", "garbage", "short", "stale"])
def test_index_damage_is_rebuilt(tmp_path: Path, damage: str) -> None:
    log_dir, batches, paths = build(tmp_path, segment_bytes=1200)
    index = paths[0].replace(".log", ".index")
    good = Path(index).read_bytes()
    assert len(good) >= 16
    if damage == "missing":
        os.remove(index)
    elif damage == "garbage":
        Path(index).write_bytes(b"\xff" * 13)
    elif damage == "short":
        Path(index).write_bytes(good[:8])
    else:
        Path(index).write_bytes(good[:8] + (1).to_bytes(4, "big") + (5).to_bytes(4, "big"))
    with reopen(log_dir, segment_bytes=1200) as log:
        assert log.read(0, 1 << 20) == batches
        for offset in range(log.end_offset()):
            assert log.read(offset, 1)[0].base_offset <= offset
    assert Path(index).read_bytes() == good


@pytest.mark.parametrize("damage", ["missing", "garbage", "wrong", "extra"])
def test_epoch_checkpoint_damage_is_rebuilt(tmp_path: Path, damage: str) -> None:
    log_dir, _, _ = build(tmp_path)
    path = Path(log_dir) / "__cluster_metadata-0" / "leader-epoch-checkpoint"
    good = path.read_bytes()
    assert good.startswith(b"0\n4\n1 0\n")
    if damage == "missing":
        path.unlink()
    elif damage == "garbage":
        path.write_bytes(b"\x00\x01zz")
    elif damage == "wrong":
        path.write_bytes(b"0\n4\n1 0\n2 9\n3 21\n4 42\n")
    else:
        path.write_bytes(b"0\n5\n1 0\n2 9\n3 24\n4 42\n9 999\n")
    with reopen(log_dir) as log:
        assert log.epoch_entries() == [(1, 0), (2, 9), (3, 24), (4, 42)]
        assert log.end_offset_for_epoch(2).offset == 24
    assert path.read_bytes() == good


def test_segment_after_a_gap_is_removed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log_dir, batches, paths = build(tmp_path)
    os.remove(paths[1])
    caplog.set_level(logging.WARNING)
    with reopen(log_dir) as log:
        assert log.segment_paths() == paths[:1]
        assert log.read(0, 1 << 20) == [b for b in batches if b.next_offset <= log.end_offset()]
        assert log.epoch_entries() == [(1, 0), (2, 9)][: len(log.epoch_entries())]
    assert not any(os.path.exists(p) for p in paths[1:])
    assert any("interrupted truncation" in r.getMessage() for r in caplog.records)


def test_leftover_temporary_files_are_removed(tmp_path: Path) -> None:
    log_dir, batches, _ = build(tmp_path)
    tmp = Path(log_dir) / "__cluster_metadata-0" / "quorum-state.tmp"
    tmp.write_bytes(b"{half")
    with reopen(log_dir) as log:
        assert log.read(0, 1 << 20) == batches
    assert not tmp.exists()


def test_a_damaged_sealed_middle_with_a_lost_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    log_dir, _, paths = build(tmp_path, segment_bytes=1200)
    (Path(log_dir) / "__cluster_metadata-0" / "leader-epoch-checkpoint").unlink()
    with open(paths[0], "r+b") as f:
        f.seek(8)
        f.write((5).to_bytes(4, "big"))  # first batch's length: the header chain breaks
    with pytest.raises(LogError, match="cannot be recovered automatically") as info:
        reopen(log_dir, segment_bytes=1200)
    assert paths[0] in str(info.value) and "position 0 (offset 0)" in str(info.value)
    RealFileSystem().lock(os.path.join(log_dir, ".lock")).release()  # the failed open let go


def test_empty_segment_file_left_by_a_roll_is_fine(tmp_path: Path) -> None:
    log_dir, batches, _ = build(tmp_path)
    end = batches[-1].next_offset
    Path(log_dir, "__cluster_metadata-0", f"{end:020d}.log").write_bytes(b"")
    with reopen(log_dir) as log:
        assert log.read(0, 1 << 20) == batches
        fill(log, [5])
        assert log.end_offset() == end + 3
    assert len(encode_batch(batches[0])) > 0
