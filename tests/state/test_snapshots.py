"""The state machine, Kafka-format snapshot files and the file snapshot store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kraft_spark.log.fs import RealFileSystem
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.producers import ProducerStateTable
from kraft_spark.raft.records import Batch, Record
from kraft_spark.raft.snapshot_api import InvalidSnapshotError
from kraft_spark.state.machine import Entry, KeyValueState
from kraft_spark.state.snapshot_file import decode_snapshot, encode_snapshot, file_name
from kraft_spark.state.snapshot_store import FileSnapshotStore


def _batch(base: int, epoch: int, *kv: tuple[bytes, bytes | None]) -> Batch:
    return Batch(base, epoch, tuple(Record(k, v, timestamp_ms=1000 + base) for k, v in kv))


def test_state_applies_sets_and_deletes_in_order() -> None:
    state = KeyValueState()
    state.apply(_batch(0, 1, (b"a", b"1"), (b"b", b"2")))
    state.apply(_batch(2, 2, (b"a", None), (b"c", b"3"), (b"b", b"4")))
    assert state.view() == {b"b": b"4", b"c": b"3"}
    assert state.get(b"b") == Entry(b"4", 4, 2, 1002, create_offset=1, version=2)
    assert (state.applied_offset, state.applied_epoch) == (5, 2)
    with pytest.raises(ValueError, match="offset 7 applied to a state at 5"):
        state.apply(_batch(7, 2, (b"x", b"y")))


def test_snapshot_file_round_trips_many_batches() -> None:
    entries = [(f"k{i}".encode(),
                Entry(b"v" * (i % 50), i, 1 + i // 3000, 5 * i, i // 2, 1 + i % 7))
               for i in range(5000)]
    sid = OffsetAndEpoch(5000, 2)
    data = b"".join(encode_snapshot(sid, entries, b'[[7,0,[]]]', 1234))
    content = decode_snapshot(data, sid, "mem")
    assert content.entries == entries
    assert content.producers == b'[[7,0,[]]]'
    assert content.last_timestamp_ms == 1234
    assert file_name(sid) == "00000000000000005000-0000000002.checkpoint"


@pytest.mark.parametrize("damage", ["truncate", "flip", "no-footer", "trailing", "epoch"])
def test_damaged_snapshots_are_refused_with_the_reason(damage: str) -> None:
    sid = OffsetAndEpoch(3, 1)
    entries = [(b"a", Entry(b"1", 0, 1, 0, 0, 1)), (b"b", Entry(b"2", 2, 1, 0, 1, 2))]
    batches = list(encode_snapshot(sid, entries, b"", 0))
    data = b"".join(batches)
    if damage == "truncate":
        data = data[:-7]
        expected = "truncated|bytes left"
    elif damage == "flip":
        mid = len(batches[0]) + 70
        data = data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1 :]
        expected = "CRC"
    elif damage == "no-footer":
        data = b"".join(batches[:-1])
        expected = "no SnapshotFooterRecord"
    elif damage == "trailing":
        data = data + batches[1]
        expected = "after the footer"
    else:
        sid = OffsetAndEpoch(3, 2)
        expected = "expected offset 0 epoch 2"
    with pytest.raises(InvalidSnapshotError, match=expected):
        decode_snapshot(data, sid, "the-file")


def test_store_writes_loads_deletes_and_sets_damaged_files_aside(tmp_path: Path) -> None:
    fs = RealFileSystem()
    store = FileSnapshotStore(fs, str(tmp_path))
    entries = [(b"k", Entry(b"v", 4, 1, 9, 4, 1))]
    for offset in (5, 10, 20):
        sid = OffsetAndEpoch(offset, 1)
        assert store.write(sid, entries, b"", 9) > 0
        store.add(sid)
    assert store.latest_id() == OffsetAndEpoch(20, 1)
    assert store.earliest_id() == OffsetAndEpoch(5, 1)
    assert store.load(OffsetAndEpoch(10, 1)).entries == entries
    assert store.delete_before(OffsetAndEpoch(10, 1)) == [OffsetAndEpoch(5, 1)]
    # A torn file: refused, set aside under a name the store never reads again.
    path = tmp_path / file_name(OffsetAndEpoch(20, 1))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(InvalidSnapshotError, match=str(path)):
        store.load(OffsetAndEpoch(20, 1))
    assert store.latest_id() == OffsetAndEpoch(10, 1)
    assert (tmp_path / "00000000000000000020-0000000001.checkpoint.corrupt").exists()
    # A leftover .part from a crash is removed when the store opens.
    (tmp_path / (file_name(OffsetAndEpoch(30, 1)) + ".part")).write_bytes(b"junk")
    reopened = FileSnapshotStore(fs, str(tmp_path))
    assert reopened.ids() == [OffsetAndEpoch(10, 1)]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".part")]


def test_download_in_chunks_installs_only_a_whole_valid_file(tmp_path: Path) -> None:
    fs = RealFileSystem()
    os.makedirs(tmp_path / "a", exist_ok=True)
    os.makedirs(tmp_path / "b", exist_ok=True)
    source = FileSnapshotStore(fs, str(tmp_path / "a"))
    sid = OffsetAndEpoch(100, 3)
    entries = [(f"k{i}".encode(), Entry(b"x" * 100, i, 3, 0, i, 1)) for i in range(100)]
    size = source.write(sid, entries, b"", 0)
    source.add(sid)
    target = FileSnapshotStore(fs, str(tmp_path / "b"))
    download = target.begin_download(sid)
    while download.position() < size:
        download.write(download.position(), source.read_chunk(sid, download.position(), 1000))
    download.complete()
    assert target.latest_id() == sid
    assert target.load(sid).entries == entries
    # A download that does not check out is refused and leaves nothing behind.
    bad = target.begin_download(OffsetAndEpoch(200, 3))
    bad.write(0, source.read_chunk(sid, 0, size - 1))
    with pytest.raises(InvalidSnapshotError):
        bad.complete()
    assert target.ids() == [sid]
    assert sorted(os.listdir(tmp_path / "b")) == [file_name(sid)]


def test_producer_table_survives_export_and_load() -> None:
    table = ProducerStateTable()
    table.on_append(Batch(0, 1, (Record(b"k", b"v"),) * 3, producer_id=9, producer_epoch=2,
                          base_sequence=0))
    copy = ProducerStateTable()
    copy.load(table.export())
    assert copy.export() == table.export()
    assert copy.check(9, 2, 0, 3)[0].value == "duplicate"
    with pytest.raises(ValueError, match="malformed producer state"):
        copy.load(b"[[1]]")


def test_dump_log_prints_a_checkpoint(tmp_path: Path) -> None:
    import io

    from kraft_spark.log.dump import dump

    store = FileSnapshotStore(RealFileSystem(), str(tmp_path))
    sid = OffsetAndEpoch(42, 3)
    store.write(sid, [(b"alpha", Entry(b"one", 40, 3, 77, 12, 3))], b"", 77)
    out = io.StringIO()
    assert dump(store.path_of(sid), out, print_data=True) is None
    text = out.getvalue()
    assert "Snapshot end offset: 42, epoch: 3" in text
    assert "SnapshotHeader {version=0, lastContainedLogTimestamp=77}" in text
    assert "key: alpha payload: one" in text
    assert "SnapshotFooter {version=0}" in text
