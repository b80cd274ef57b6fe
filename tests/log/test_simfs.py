"""SimulatedFileSystem: what survives a crash, a torn write, a lost disk."""

from __future__ import annotations

import random

import pytest

from kraft_spark.log.errors import LogDirLockedError
from kraft_spark.log.simfs import SimulatedFileSystem


@pytest.fixture
def fs() -> SimulatedFileSystem:
    fs = SimulatedFileSystem()
    fs.makedirs("/d")
    return fs


def append(fs: SimulatedFileSystem, path: str, data: bytes) -> None:
    fs.write_at(path, fs.size(path) if fs.exists(path) else 0, data)


def durable_file(fs: SimulatedFileSystem, path: str, data: bytes) -> None:
    append(fs, path, data)
    fs.fsync(path)
    fs.fsync_dir("/d")


def test_unsynced_writes_are_lost_and_synced_ones_kept(fs: SimulatedFileSystem) -> None:
    durable_file(fs, "/d/a", b"durable")
    append(fs, "/d/a", b"+lost")
    assert fs.read("/d/a") == b"durable+lost"
    assert fs.unsynced_paths() == ["/d/a"]
    fs.crash(random.Random(1))
    assert fs.read("/d/a") == b"durable"
    assert fs.unsynced_paths() == []


def test_truncate_is_lost_without_fsync(fs: SimulatedFileSystem) -> None:
    durable_file(fs, "/d/a", b"0123456789")
    fs.truncate("/d/a", 4)
    assert fs.read("/d/a") == b"0123"
    fs.crash(random.Random(1))
    assert fs.read("/d/a") == b"0123456789"


def test_create_needs_a_directory_fsync(fs: SimulatedFileSystem) -> None:
    append(fs, "/d/new", b"data")
    fs.fsync("/d/new")  # the content is durable, the name is not
    fs.crash(random.Random(1))
    assert not fs.exists("/d/new")
    assert fs.listdir("/d") == []


def test_rename_and_remove_are_undone_without_a_directory_fsync(fs: SimulatedFileSystem) -> None:
    durable_file(fs, "/d/old", b"old")
    durable_file(fs, "/d/gone", b"gone")
    fs.write_file("/d/tmp", b"new")
    fs.fsync("/d/tmp")
    fs.rename("/d/tmp", "/d/old")
    fs.remove("/d/gone")
    assert fs.read("/d/old") == b"new" and not fs.exists("/d/gone")
    fs.crash(random.Random(1))
    assert fs.read("/d/old") == b"old"
    assert fs.read("/d/gone") == b"gone"
    assert not fs.exists("/d/tmp")


def test_rename_is_durable_after_a_directory_fsync(fs: SimulatedFileSystem) -> None:
    durable_file(fs, "/d/old", b"old")
    fs.write_file("/d/tmp", b"new")
    fs.fsync("/d/tmp")
    fs.rename("/d/tmp", "/d/old")
    fs.fsync_dir("/d")
    fs.crash(random.Random(1))
    assert fs.read("/d/old") == b"new"
    assert fs.listdir("/d") == ["old"]


def test_torn_crash_keeps_a_prefix_of_the_last_write(fs: SimulatedFileSystem) -> None:
    durable_file(fs, "/d/a", b"base|")
    durable_file(fs, "/d/b", b"other|")
    append(fs, "/d/b", b"earlier-unsynced")
    append(fs, "/d/a", b"first|")
    append(fs, "/d/a", b"0123456789")
    fs.crash(random.Random(3), torn=True)
    content = fs.read("/d/a")
    assert content.startswith(b"base|first|")
    assert len(content) < len(b"base|first|0123456789")
    assert b"base|first|0123456789".startswith(content)
    assert fs.read("/d/b") == b"other|"  # only the last write's file keeps anything


def test_torn_crash_is_deterministic_per_seed(fs: SimulatedFileSystem) -> None:
    results = set()
    for _ in range(2):
        other = SimulatedFileSystem()
        other.makedirs("/d")
        durable_file(other, "/d/a", b"x")
        append(other, "/d/a", bytes(range(200)))
        other.crash(random.Random(42), torn=True)
        results.add(other.read("/d/a"))
    assert len(results) == 1


def test_torn_crash_of_an_unnamed_file_keeps_nothing(fs: SimulatedFileSystem) -> None:
    append(fs, "/d/never-named", b"abc")
    fs.crash(random.Random(1), torn=True)
    assert not fs.exists("/d/never-named")


def test_wipe_loses_everything(fs: SimulatedFileSystem) -> None:
    durable_file(fs, "/d/a", b"data")
    fs.wipe()
    assert not fs.exists("/d/a") and not fs.exists("/d")


def test_locks_are_exclusive_and_released_by_a_crash(fs: SimulatedFileSystem) -> None:
    first = fs.lock("/d/.lock")
    with pytest.raises(LogDirLockedError, match="/d"):
        fs.lock("/d/.lock")
    fs.crash(random.Random(1))
    second = fs.lock("/d/.lock")
    first.release()  # a stale holder cannot release the new owner's lock
    with pytest.raises(LogDirLockedError):
        fs.lock("/d/.lock")
    second.release()
    fs.lock("/d/.lock").release()


def test_missing_files_raise_like_the_os(fs: SimulatedFileSystem) -> None:
    with pytest.raises(FileNotFoundError):
        fs.read("/d/none")
    with pytest.raises(FileNotFoundError):
        append(fs, "/nodir/x", b"")
    fs.makedirs("/d/sub/deeper")
    assert fs.listdir("/d") == ["sub"]


def test_flip_bit_changes_durable_content(fs: SimulatedFileSystem) -> None:
    durable_file(fs, "/d/a", b"\x00\x00")
    fs.flip_bit("/d/a", 9)
    fs.crash(random.Random(1))
    assert fs.read("/d/a") == b"\x00\x02"


def test_write_at_overwrites_in_place_and_pads_with_zeros(fs: SimulatedFileSystem) -> None:
    durable_file(fs, "/d/a", b"0123456789")
    fs.write_at("/d/a", 2, b"ab")
    fs.write_at("/d/a", 12, b"z")
    assert fs.read("/d/a") == b"01ab456789\0\0z"
    fs.crash(random.Random(1))
    assert fs.read("/d/a") == b"0123456789"


def test_preallocation_reads_as_zeros_and_survives_only_when_fsynced(
    fs: SimulatedFileSystem,
) -> None:
    durable_file(fs, "/d/a", b"head")
    fs.preallocate("/d/a", 10)
    fs.preallocate("/d/a", 6)  # never shortens
    assert fs.read("/d/a") == b"head" + bytes(6)
    fs.crash(random.Random(1))
    assert fs.read("/d/a") == b"head"
    fs.preallocate("/d/a", 10)
    fs.fsync("/d/a")
    fs.write_at("/d/a", 4, b"tail")
    fs.crash(random.Random(1))
    assert fs.read("/d/a") == b"head" + bytes(6)


def test_torn_write_inside_preallocated_space_keeps_a_prefix(fs: SimulatedFileSystem) -> None:
    durable_file(fs, "/d/a", b"head")
    fs.preallocate("/d/a", 64)
    fs.fsync("/d/a")
    fs.write_at("/d/a", 4, b"0123456789")
    fs.crash(random.Random(5), torn=True)
    content = fs.read("/d/a")
    assert len(content) == 64
    kept = content[4:].rstrip(b"\0")
    assert b"0123456789".startswith(kept) and len(kept) < 10
