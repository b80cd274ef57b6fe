"""KIP-630 in the core: Fetch below the log start answers the SnapshotId, FetchSnapshot moves
the snapshot in chunks, and the follower installs it and continues from its end offset."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from kraft_spark.log.fs import RealFileSystem
from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.messages import (
    CLIENT_REPLICA_ID,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    ProduceRequest,
    Response,
)
from kraft_spark.raft.records import Record
from kraft_spark.raft.state import Role
from kraft_spark.sim.memlog import MemoryLog
from kraft_spark.state.machine import KeyValueState
from kraft_spark.state.snapshot_store import FileSnapshotStore
from tests.core_net import Net

CLUSTER = "snap"
CONFIG = QuorumConfig(fetch_max_bytes=700)  # small chunks: several FetchSnapshot rounds
def leader_with_snapshot(tmp_path: Path, net: Net) -> tuple[RaftCore, FileSnapshotStore]:
    """Node 1, the only voter, leading with 60 committed records, a snapshot at its high
    watermark and its log start moved there."""
    fs = RealFileSystem()
    (tmp_path / "n1").mkdir()
    store = FileSnapshotStore(fs, str(tmp_path / "n1"))
    log = MemoryLog()
    core = RaftCore(node_id=1, cluster_id=CLUSTER, voters=(1,), log=log, config=CONFIG,
                    rng=random.Random(1), now_ms=net.now, snapshots=store)
    net.cores[1] = core
    net.now += 5000
    net.pump(5)
    assert core.role is Role.LEADER
    for i in range(60):
        core.handle_request(net.now, 0, ("client", i), ProduceRequest(
            (Record(b"k%d" % (i % 20), b"v%d" % i),), 1000))
        net.pump(2)
    hw = core.high_watermark
    state = KeyValueState()
    state.apply_all(b for b in log.read(0, 1 << 30) if b.base_offset < hw)
    sid = OffsetAndEpoch(state.applied_offset, state.applied_epoch)
    store.write(sid, state.items(), core.producers.export(), 0)
    store.add(sid)
    log.advance_start_offset(sid.offset)
    core.handle_request(net.now, 0, ("client", 60), ProduceRequest((Record(b"late", b"1"),), 1000))
    net.pump(2)
    return core, store


def observer(tmp_path: Path, net: Net) -> tuple[RaftCore, FileSnapshotStore, MemoryLog]:
    (tmp_path / "n5").mkdir()
    store = FileSnapshotStore(RealFileSystem(), str(tmp_path / "n5"))
    log = MemoryLog()
    core = RaftCore(node_id=5, cluster_id=CLUSTER, voters=(1,), log=log, config=CONFIG,
                    rng=random.Random(5), now_ms=net.now, snapshots=store)
    net.cores[5] = core
    return core, store, log


def test_an_empty_observer_catches_up_from_the_snapshot(tmp_path: Path) -> None:
    net = Net()
    leader, leader_store = leader_with_snapshot(tmp_path, net)
    sid = leader_store.latest_id()
    assert sid is not None and sid.offset > 50
    obs, store, log = observer(tmp_path, net)
    net.pump()
    assert net.installed[5] == [sid]
    assert store.ids() == [sid]
    assert log.start_offset() == sid.offset
    assert log.end_offset() == leader.log.end_offset()
    assert obs.high_watermark == leader.high_watermark
    # The snapshot is the leader's, byte for byte.
    assert (tmp_path / "n5" / leader_store.path_of(sid).split("/")[-1]).read_bytes() == \
        Path(leader_store.path_of(sid)).read_bytes()
    # New records still flow after the install.
    leader.handle_request(net.now, 0, ("client", 99), ProduceRequest((Record(b"x", b"y"),), 1000))
    net.pump()
    assert log.end_offset() == leader.log.end_offset() > sid.offset


def test_a_damaged_chunk_is_refused_and_the_download_starts_again(tmp_path: Path) -> None:
    net = Net()
    _, leader_store = leader_with_snapshot(tmp_path, net)
    _, store, _ = observer(tmp_path, net)
    damaged: list[int] = []
    positions: list[int] = []

    def flip_once(message: Response) -> Response:
        if isinstance(message, FetchSnapshotResponse):
            positions.append(message.position)
        if isinstance(message, FetchSnapshotResponse) and message.data and not damaged:
            damaged.append(message.position)
            data = bytes([message.data[0] ^ 0xFF]) + message.data[1:]
            return dataclasses.replace(message, data=data)
        return message

    net.tamper = flip_once
    net.pump()
    assert damaged == [0]
    # The damaged download is refused only when complete (the CRCs are checked on the whole
    # file); then the download starts over from position 0 and succeeds.
    assert positions.count(0) == 2 and len(positions) > 2
    assert net.installed[5] == [leader_store.latest_id()]
    assert store.ids() == [leader_store.latest_id()]


def _ask(core: RaftCore, request: object) -> Response:
    core.handle_request(core.now, 7, "t", request)  # type: ignore[arg-type]
    [reply] = [r for r in core.take_ready().replies if r.token == "t"]
    return reply.message


def test_leader_errors_for_unknown_snapshots_positions_and_reads_below_start(
    tmp_path: Path,
) -> None:
    net = Net()
    leader, store = leader_with_snapshot(tmp_path, net)
    sid = store.latest_id()
    assert sid is not None
    epoch = leader.epoch
    unknown = _ask(leader, FetchSnapshotRequest(CLUSTER, 7, epoch, OffsetAndEpoch(3, 1), 0, 100))
    assert unknown.error == ErrorCode.SNAPSHOT_NOT_FOUND
    size = store.size(sid)
    assert size is not None
    beyond = _ask(leader, FetchSnapshotRequest(CLUSTER, 7, epoch, sid, size, 100))
    assert beyond.error == ErrorCode.POSITION_OUT_OF_RANGE
    fenced = _ask(leader, FetchSnapshotRequest(CLUSTER, 7, epoch - 1, sid, 0, 100))
    assert fenced.error == ErrorCode.FENCED_LEADER_EPOCH
    foreign = _ask(leader, FetchSnapshotRequest("other", 7, epoch, sid, 0, 100))
    assert foreign.error == ErrorCode.INCONSISTENT_CLUSTER_ID
    read = _ask(leader, FetchRequest(CLUSTER, CLIENT_REPLICA_ID, -1, 5, 0, 0, 1000))
    assert isinstance(read, FetchResponse)
    assert read.error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (read.snapshot_id, read.log_start_offset) == (sid, sid.offset)
    # A replica at the log start in the snapshot's epoch is served from the log.
    at_start = _ask(leader, FetchRequest(CLUSTER, 7, epoch, sid.offset, sid.epoch, 0, 1000))
    assert isinstance(at_start, FetchResponse)
    assert at_start.snapshot_id is None and at_start.diverging_epoch is None
    assert at_start.batches and at_start.batches[0].base_offset == sid.offset
