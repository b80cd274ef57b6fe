"""``kraft-spark format``, ``dump-log`` and ``bench storage``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kraft_spark.cli import main
from kraft_spark.log import RealFileSystem, SegmentedLog
from kraft_spark.log.bench import FLOOR_APPEND, FLOOR_RESERVED
from kraft_spark.raft.records import LeaderChange, leader_change_batch
from tests.log.helpers import fill


def make_log(tmp_path: Path) -> str:
    log_dir = str(tmp_path / "node")
    with SegmentedLog.open(RealFileSystem(), log_dir, segment_bytes=300) as log:
        log.append(leader_change_batch(0, 1, LeaderChange(1, (1, 2, 3), (1, 2)), 1234))
        fill(log, [1, 1, 2])
    return log_dir


def test_format_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = str(tmp_path / "n1")
    assert main(["format", "--cluster-id", "c1", "--node-id", "1", "--log-dir", log_dir]) == 0
    assert "cluster.id=c1 node.id=1 directory.id=" in capsys.readouterr().out
    assert main(["format", "--cluster-id", "c1", "--node-id", "2", "--log-dir", log_dir]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kraft-spark format: ")
    assert "node.id is 1" in err and "node.id 2" in err and "meta.properties" in err
    assert "Traceback" not in err
    assert main(["format", "--cluster-id", "c1", "--node-id", "1", "--log-dir", log_dir,
                 "--ignore-formatted"]) == 0


def test_dump_log_prints_every_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = make_log(tmp_path)
    assert main(["dump-log", log_dir]) == 0
    out = capsys.readouterr().out
    assert "Dumping " in out and "Log starting offset: 0" in out
    lines = [line for line in out.splitlines() if line.startswith("baseOffset:")]
    assert len(lines) == 4
    assert lines[0].startswith("baseOffset: 0 lastOffset: 0 count: 1")
    assert "isControl: true" in lines[0] and "partitionLeaderEpoch: 1" in lines[0]
    assert "position: 0 CreateTime: 1234" in lines[0] and "isvalid: true" in lines[0]
    assert lines[3].startswith("baseOffset: 7 lastOffset: 9 count: 3")
    assert "partitionLeaderEpoch: 2" in lines[3]


def test_dump_log_print_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = make_log(tmp_path)
    segment = str(Path(log_dir) / "__cluster_metadata-0" / "00000000000000000000.log")
    assert main(["dump-log", segment, "--print-data"]) == 0
    out = capsys.readouterr().out
    assert "LeaderChange: version: 0 leaderId: 1 voters: [1, 2, 3] grantingVoters: [1, 2]" in out
    assert "| offset: 1 CreateTime: 1001 keySize: 2 valueSize: 20" in out
    assert "key: k1 payload: " in out


def test_dump_log_stops_at_the_first_invalid_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_dir = make_log(tmp_path)
    segment = Path(log_dir) / "__cluster_metadata-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    first = int.from_bytes(data[8:12], "big") + 12
    data[first + 70] ^= 0x01
    segment.write_bytes(bytes(data))
    assert main(["dump-log", str(segment)]) == 1
    captured = capsys.readouterr()
    assert captured.out.count("baseOffset:") == 1
    assert f"{segment}: invalid batch at position {first} (offset 1): CRC mismatch" \
        in captured.err
    assert "Traceback" not in captured.err


def test_dump_log_of_nothing_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dump-log", str(tmp_path / "missing")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert main(["dump-log", str(tmp_path)]) == 2
    assert "no segment files" in capsys.readouterr().err


def test_bench_storage_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "storage", "--dir", str(tmp_path), "--records", "300", "--batch", "7",
            "--value-bytes", "50", "--json"]
    assert main(args) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    for key in ("records_per_s", "mb_per_s", "floor_mb_per_s", "read_mb_per_s"):
        assert result[key] > 0
    assert result["records"] == 300 and result["batches"] == 43
    assert result["preallocate"] is True  # as a node's segments are
    assert result["floor_kind"] in (FLOOR_APPEND, FLOOR_RESERVED)
    assert "append + fsync per batch" in "\n".join(out)
    assert f"floor: {result['floor_kind']}" in "\n".join(out)
    with SegmentedLog.open(RealFileSystem(), str(tmp_path / "log")) as log:
        assert log.end_offset() == 300  # the log is left in place
    assert main(args) == 0  # and a second run replaces it
    capsys.readouterr()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "log").mkdir()
    assert main(["bench", "storage", "--dir", str(tmp_path / "other"), "--records", "1"]) == 2
    assert "not a previous storage bench log" in capsys.readouterr().err


def test_bench_storage_without_preallocation(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "storage", "--dir", str(tmp_path), "--records", "20", "--batch", "5",
                 "--no-preallocate", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1])["preallocate"] is False
    assert "segments not preallocated" in out
    with SegmentedLog.open(RealFileSystem(), str(tmp_path / "log")) as log:
        assert log.end_offset() == 20
