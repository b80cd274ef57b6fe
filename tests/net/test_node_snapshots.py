"""KIP-630 on real nodes: bounded logs, snapshots on disk, a wiped voter catching up from a
snapshot over FetchSnapshot, restarts that replay only the log after the snapshot."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from kraft_spark.client import AsyncQuorumClient
from kraft_spark.client.errors import OffsetBelowLogStartError
from kraft_spark.log.meta import format_log_dir
from kraft_spark.net.config import NodeConfig
from kraft_spark.net.local_requests import local_answer
from kraft_spark.net.metrics_server import render_node_metrics
from kraft_spark.net.node import RaftNode
from kraft_spark.raft.config import ConfigError
from kraft_spark.raft.messages import ErrorCode, ProduceRequest, ProduceResponse
from kraft_spark.raft.records import Record
from kraft_spark.state.policy import SnapshotConfig
from tests.metrics_text import samples
from tests.net.helpers import CLUSTER, STEADY, make_nodes, run_nodes, the_leader, wait_for

pytestmark = pytest.mark.timeout(120)

# Small everything: a snapshot every ~20 KB of records, 4 KB segments, retention at 30 KB.
SMALL = SnapshotConfig(max_bytes_between_snapshots=20_000, segment_bytes=4096,
                       retention_bytes=30_000, hold_for_observers=False)


def small_nodes(tmp: Path) -> list[RaftNode]:
    # STEADY: not about elections; a stalled shared loop must not depose the leader mid-append
    return [RaftNode(replace(n.config, snapshots=SMALL)) for n in make_nodes(tmp, quorum=STEADY)]


async def append_many(leader: RaftNode, n: int, *, keys: int = 50, start: int = 0) -> None:
    for i in range(start, start + n, 10):
        records = tuple(Record(b"key-%d" % (j % keys), b"v%06d" % j + b"x" * 80)
                        for j in range(i, min(i + 10, start + n)))
        answer = await local_answer(leader, ProduceRequest(records, 5000))
        assert isinstance(answer, ProduceResponse) and answer.error == ErrorCode.NONE


def partition(node: RaftNode) -> Path:
    return Path(node.config.log_dir) / "__cluster_metadata-0"


def test_logs_stay_bounded_and_a_wiped_voter_catches_up_from_a_snapshot(
    tmp_path: Path,
) -> None:
    nodes = small_nodes(tmp_path)

    async def body(nodes: list[RaftNode]) -> None:
        leader = the_leader(nodes)
        await append_many(leader, 3000)
        await wait_for(lambda: all(n.log.start_offset() > 0 for n in nodes), 20,
                       "retention on every node")
        for node in nodes:
            await node.keeper.wait_idle()
            files = sorted(p.name for p in partition(node).iterdir())
            checkpoints = [f for f in files if f.endswith(".checkpoint")]
            assert checkpoints, files
            assert not [f for f in files if f.endswith(".part")]
            log_bytes = sum(p.stat().st_size for p in partition(node).glob("*.log"))
            assert log_bytes < 3000 * 100 // 2  # far below the history appended
            info = node.describe()
            assert info["log_start_offset"] == node.log.start_offset() > 0
            assert info["latest_snapshot"] is not None
        metrics = render_node_metrics(leader)
        start = leader.log.start_offset()
        values = samples(metrics)
        me = f'node_id="{leader.node_id}"'
        assert values[f"kafka_raft_log_start_offset{{{me}}}"] == start
        assert values[f"kafka_raft_snapshots_generated_total{{{me}}}"] >= 1
        # A read below the log start names the log start and the snapshot (never []).
        client = AsyncQuorumClient([f"127.0.0.1:{leader.port}"])
        try:
            with pytest.raises(OffsetBelowLogStartError) as caught:
                await client.read(0, 10)
            info = await client.describe_quorum()
        finally:
            await client.close()
        assert caught.value.log_start_offset == leader.log.start_offset()
        # DescribeQuorum carries the leader's log start and newest snapshot.
        assert info.log_start_offset == leader.log.start_offset()
        assert info.latest_snapshot == leader.describe()["latest_snapshot"]
        assert caught.value.snapshot == leader.describe()["latest_snapshot"]
        assert f"below the log start offset {leader.log.start_offset()}" in str(caught.value)
        # Wipe one follower and bring it back empty: it must take the leader's snapshot.
        victim = next(n for n in nodes if n is not leader)
        await victim.stop(graceful=False)
        shutil.rmtree(victim.config.log_dir)
        format_log_dir(victim.config.log_dir, cluster_id=CLUSTER, node_id=victim.node_id)
        reborn = RaftNode(replace(victim.config, disk_lost=True))
        nodes[nodes.index(victim)] = reborn
        await reborn.start()
        await append_many(leader, 50, start=3000)
        await wait_for(lambda: reborn.high_watermark >= leader.high_watermark
                       and reborn.keeper.state.applied_offset >= leader.high_watermark,
                       20, "the wiped voter to catch up")
        assert reborn.log.start_offset() > 0  # it started from a snapshot, not offset 0
        assert reborn.keeper.state.view() == leader.keeper.state.view()
        assert len(leader.keeper.state) == 50

    asyncio.run(run_nodes(nodes, body))


def test_a_restart_loads_the_snapshot_and_replays_only_the_log_after_it(
    tmp_path: Path,
) -> None:
    nodes = small_nodes(tmp_path)
    views: dict[int, dict[bytes, bytes]] = {}

    async def body(nodes: list[RaftNode]) -> None:
        leader = the_leader(nodes)
        await append_many(leader, 1000, keys=200)
        await wait_for(lambda: all(n.keeper.state.applied_offset >= leader.high_watermark
                                   for n in nodes), 10, "every node applied")
        for n in nodes:
            await n.keeper.wait_idle()
            views[n.node_id] = n.keeper.state.view()

    asyncio.run(run_nodes(nodes, body))
    restarted = [RaftNode(n.config) for n in nodes]

    async def check(nodes: list[RaftNode]) -> None:
        for n in nodes:
            assert n.keeper.store.latest_id() is not None
            await wait_for(lambda n=n: n.keeper.state.view() == views[n.node_id], 10,  # type: ignore[misc]
                           "the state rebuilt from snapshot plus log")

    asyncio.run(run_nodes(restarted, check))


def test_a_damaged_snapshot_is_set_aside_and_the_node_still_starts(tmp_path: Path) -> None:
    nodes = small_nodes(tmp_path)

    async def body(nodes: list[RaftNode]) -> None:
        await append_many(the_leader(nodes), 800)
        for n in nodes:
            await n.keeper.wait_idle()

    asyncio.run(run_nodes(nodes, body))
    victim = nodes[0]
    newest = sorted(partition(victim).glob("*.checkpoint"))[-1]
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    restarted = [RaftNode(n.config) for n in nodes]

    async def check(nodes: list[RaftNode]) -> None:
        # Set aside under a name never read again, named in the log; the node then fetches a
        # good copy from the leader (its own log starts at that snapshot, so it has no other
        # way to rebuild its state) and ends with the leader's state.
        assert newest.with_suffix(".checkpoint.corrupt").exists()
        leader = the_leader(nodes)
        await append_many(leader, 20, start=800)
        again = restarted[0]
        await wait_for(lambda: again.keeper.state.applied_offset >= leader.high_watermark, 20,
                       "the node with the damaged snapshot to catch up")
        assert again.keeper.state.view() == leader.keeper.state.view()

    asyncio.run(run_nodes(restarted, check))


def test_snapshot_settings_use_kafkas_names_and_refuse_bad_values() -> None:
    base = {"node.id": "1", "controller.quorum.voters": "1@127.0.0.1:9093", "log.dirs": "/x"}
    config = NodeConfig.from_properties({
        **base,
        "metadata.log.max.record.bytes.between.snapshots": "1000",
        "metadata.log.max.snapshot.interval.ms": "5000",
        "metadata.log.segment.bytes": "2048",
        "metadata.max.retention.bytes": "-1",
        "metadata.max.retention.ms": "60000",
        "kraft.retention.hold.observers": "false",
    })
    assert config.snapshots == SnapshotConfig(1000, 5000, 2048, -1, 60000, False)
    assert NodeConfig.from_properties(base).snapshots == SnapshotConfig()
    with pytest.raises(ConfigError, match=r"metadata\.log\.segment\.bytes"):
        NodeConfig.from_properties({**base, "metadata.log.segment.bytes": "10"})
    with pytest.raises(ConfigError, match=r"kraft\.retention\.hold\.observers"):
        NodeConfig.from_properties({**base, "kraft.retention.hold.observers": "maybe"})
