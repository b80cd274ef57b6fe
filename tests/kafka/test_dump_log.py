"""Kafka's own DumpLogSegments (kafka-dump-log.sh) reads our log segments and our snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft_spark.log.fs import RealFileSystem
from kraft_spark.log.segmented_log import SegmentedLog
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch, LeaderChange, Record, leader_change_batch
from kraft_spark.state.machine import KeyValueState
from kraft_spark.state.snapshot_store import FileSnapshotStore
from tests.kafka.kafka_dist import KafkaUnavailable, run_kafka_tool

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900)]
DUMP = "org.apache.kafka.tools.DumpLogSegments"


def _dump(path: Path) -> str:
    try:
        result = run_kafka_tool(DUMP, ["--files", str(path), "--print-data-log"])
    except KafkaUnavailable as exc:
        pytest.skip(f"Kafka's tools are not available: {exc}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Exception" not in result.stdout + result.stderr, result.stdout + result.stderr
    return result.stdout


def _write_log(tmp_path: Path) -> tuple[SegmentedLog, list[Batch]]:
    log = SegmentedLog.open(RealFileSystem(), str(tmp_path / "log"), segment_bytes=1 << 20)
    batches = [leader_change_batch(0, 1, LeaderChange(1, (1, 2, 3), (1, 2)), 1000)]
    for i in range(1, 40, 3):
        batches.append(Batch(i, 1, tuple(
            Record(b"key-%d" % j, b"value-%d" % j, timestamp_ms=2000 + j) for j in range(i, i + 3)
        )))
    for batch in batches:
        log.append(batch)
    log.flush()
    return log, batches


def test_kafka_reads_our_segment_and_its_leader_change(tmp_path: Path) -> None:
    log, batches = _write_log(tmp_path)
    segment = Path(log.segment_paths()[0])
    log.close()
    out = _dump(segment)
    assert "baseOffset: 0 lastOffset: 0 count: 1" in out
    assert "LeaderChange" in out
    assert f"baseOffset: {batches[-1].base_offset} lastOffset: {batches[-1].last_offset}" in out
    assert "key: key-39 payload: value-39" in out
    assert out.count("isvalid: true") == len(batches)


def test_kafka_reads_our_snapshot_checkpoint(tmp_path: Path) -> None:
    log, batches = _write_log(tmp_path)
    state = KeyValueState()
    state.apply_all(batches)
    store = FileSnapshotStore(RealFileSystem(), log.partition_dir)
    sid = OffsetAndEpoch(state.applied_offset, state.applied_epoch)
    store.write(sid, state.items(), state.producers.export(), 5000)
    log.close()
    out = _dump(Path(store.path_of(sid)))
    assert "SnapshotHeader" in out and "SnapshotFooter" in out
    assert "key: key-1 payload: value-1" in out
    assert out.count("isvalid: true") >= 3  # header, data, footer batches


def test_kafka_decodes_our_kip853_records_in_segments_and_snapshots(tmp_path: Path) -> None:
    import uuid

    from kraft_spark.raft.voter_records import encode_voters, kraft_version_batch, voters_batch
    from kraft_spark.raft.voter_set import Endpoint, Voter, VoterSet

    voters = VoterSet((Voter(1, uuid.UUID(int=5), (Endpoint("CONTROLLER", "h", 9093),)),))
    log = SegmentedLog.open(RealFileSystem(), str(tmp_path / "log"), segment_bytes=1 << 20)
    log.append(kraft_version_batch(0, 1, 1, 1000))
    log.append(voters_batch(1, 1, voters, 1000))
    log.flush()
    segment = Path(log.segment_paths()[0])
    log.close()
    out = _dump(segment)
    assert 'KRaftVersion {"version":0,"kRaftVersion":1}' in out
    assert ('KRaftVoters {"version":0,"voters":[{"voterId":1,"voterDirectoryId":'
            '"AAAAAAAAAAAAAAAAAAAABQ","endpoints":[{"name":"CONTROLLER","host":"h","port":9093}]'
            in out)
    (tmp_path / "snap").mkdir()
    store = FileSnapshotStore(RealFileSystem(), str(tmp_path / "snap"))
    state = KeyValueState()
    state.apply(Batch(0, 1, (Record(b"k", b"v", 1000),)))
    sid = OffsetAndEpoch(1, 1)
    store.write(sid, state.items(), b"", 5000, voters=encode_voters(voters))
    snap = _dump(Path(store.path_of(sid)))
    assert "SnapshotHeader" in snap and "KRaftVoters" in snap and "SnapshotFooter" in snap
