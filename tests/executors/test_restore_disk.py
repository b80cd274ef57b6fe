"""A fresh voter told to restore (executors/restore_disk.py): the driver's line and bytes over
the control channel become a checked snapshot in its log directory, and its storage then opens
with the log starting at the snapshot's end and the state it holds."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from executors.restore_disk import await_start
from kraft_spark.log.meta import format_log_dir
from kraft_spark.net.state_keeper import open_storage
from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.snapshot_api import InvalidSnapshotError
from kraft_spark.state.machine import Entry
from kraft_spark.state.policy import SnapshotConfig
from kraft_spark.state.snapshot_file import SnapshotId, encode_snapshot


def _feed(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def test_a_restore_installs_the_snapshot_and_the_log_starts_at_its_end(tmp_path: Path) -> None:
    log_dir = str(tmp_path / "node-0")
    format_log_dir(log_dir, cluster_id="c" * 22, node_id=0)
    entries = [(b"a", Entry(b"1", 3, 2, 1000, 3, 1)), (b"b", Entry(b"2", 7, 2, 1001, 5, 2))]
    data = b"".join(encode_snapshot(SnapshotId(12, 2), entries, b"", 1001))

    async def body() -> str:
        return await await_start(_feed(f"restore 12 2 {len(data)}\n".encode() + data), log_dir)

    assert asyncio.run(body()) == "restore"
    storage = open_storage(log_dir, SnapshotConfig(), node_id=0, lock_timeout_s=5.0,
                           preallocate=False)
    try:
        assert storage.log.start_offset() == 12 and storage.log.end_offset() == 12
        assert storage.state.view() == {b"a": b"1", b"b": b"2"}
        assert (storage.state.applied_offset, storage.state.applied_epoch) == (12, 2)
        assert storage.store.latest_id() == SnapshotId(12, 2)
        # No quorum-state on the fresh disk: the node starts in the snapshot's epoch (it once
        # started in epoch 0, and a leader of epoch 1 appended after a snapshot of epoch 2:
        # found by the multi-host scenario)
        core = RaftCore(node_id=0, cluster_id="c" * 22, voters=[0, 1, 2], log=storage.log,
                        config=QuorumConfig(), rng=random.Random(0), now_ms=0,
                        snapshots=storage.store)
        assert core.epoch == 2 and core.high_watermark == 12
    finally:
        storage.log.close()


def test_start_words_and_bad_input_from_the_driver(tmp_path: Path) -> None:
    log_dir = str(tmp_path / "node-0")
    format_log_dir(log_dir, cluster_id="c" * 22, node_id=0)

    async def word(raw: bytes) -> str:
        return await await_start(_feed(raw), log_dir)

    assert asyncio.run(word(b"start\n")) == "start"
    assert asyncio.run(word(b"start-fresh\n")) == "start-fresh"
    assert asyncio.run(word(b"")) == "stop"  # the driver went away
    with pytest.raises(ValueError, match="unexpected word"):
        asyncio.run(word(b"restart now\n"))
    with pytest.raises(InvalidSnapshotError):
        asyncio.run(word(b"restore 5 1 4\njunk"))
    assert not list((tmp_path / "node-0" / "__cluster_metadata-0").glob("*.checkpoint*"))
