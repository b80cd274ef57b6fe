"""quorum-state, meta.properties and the directory lock."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kraft_spark.log import (
    LogDirLockedError,
    MetaPropertiesError,
    NotFormattedError,
    QuorumStateError,
    RealFileSystem,
    SegmentedLog,
    SimulatedFileSystem,
    format_log_dir,
    new_directory_id,
    read_meta_properties,
    read_quorum_state,
    write_quorum_state,
)

STATE = {
    "clusterId": "abc",
    "leaderId": 2,
    "leaderEpoch": 7,
    "votedId": -1,
    "appliedOffset": 0,
    "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}],
    "data_version": 0,
}


# -- quorum-state ------------------------------------------------------------------------------


def test_quorum_state_is_kafka_json(tmp_path: Path) -> None:
    log_dir = str(tmp_path)
    assert read_quorum_state(log_dir) is None
    write_quorum_state(log_dir, STATE)
    path = tmp_path / "__cluster_metadata-0" / "quorum-state"
    assert path.read_text() == (
        '{"clusterId":"abc","leaderId":2,"leaderEpoch":7,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    assert read_quorum_state(log_dir) == STATE
    assert os.listdir(path.parent) == ["quorum-state"]  # no temp file left behind


def test_quorum_state_extra_keys_pass_through(tmp_path: Path) -> None:
    state = {**STATE, "kraftSparkExtension": {"directoryId": "x", "n": [1, 2]}}
    del state["data_version"]  # defaults to 0
    write_quorum_state(str(tmp_path), state)
    assert read_quorum_state(str(tmp_path)) == {**state, "data_version": 0}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"leaderEpoch": "7"}, "leaderEpoch"),
        ({"votedId": True}, "votedId"),
        ({"currentVoters": [1, 2]}, "voterId"),
        ({"data_version": 1}, "data_version"),
    ],
)
def test_invalid_quorum_state_is_refused(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    with pytest.raises(QuorumStateError, match=message):
        write_quorum_state(str(tmp_path), {**STATE, **change})
    bad = dict(STATE)
    del bad["clusterId"]
    with pytest.raises(QuorumStateError, match="missing field 'clusterId'"):
        write_quorum_state(str(tmp_path), bad)


def test_unreadable_quorum_state_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "__cluster_metadata-0" / "quorum-state"
    path.parent.mkdir()
    path.write_text('{"clusterId": ')
    with pytest.raises(QuorumStateError, match=str(path)):
        read_quorum_state(str(tmp_path))
    path.write_text("[1]")
    with pytest.raises(QuorumStateError, match="JSON object"):
        read_quorum_state(str(tmp_path))


def test_quorum_state_is_durable_when_write_returns() -> None:
    fs = SimulatedFileSystem()
    write_quorum_state("/n", STATE, fs)
    write_quorum_state("/n", {**STATE, "leaderEpoch": 8}, fs)
    fs.crash(random.Random(0), torn=True)
    state = read_quorum_state("/n", fs)
    assert state is not None and state["leaderEpoch"] == 8


class _Crash(Exception):
    pass


class CrashAfter:
    """Delegates to a simulated disk and "loses power" at its n-th mutating call."""

    MUTATING = frozenset({"append", "write_file", "truncate", "fsync", "fsync_dir", "rename",
                          "remove", "makedirs"})

    def __init__(self, inner: SimulatedFileSystem, n: int) -> None:
        self.inner = inner
        self.remaining = n

    def __getattr__(self, name: str) -> object:
        attr = getattr(self.inner, name)
        if name not in self.MUTATING:
            return attr

        def call(*args: object) -> object:
            if self.remaining == 0:
                raise _Crash
            self.remaining -= 1
            return attr(*args)

        return call


def test_quorum_state_replacement_is_atomic_under_crashes() -> None:
    """Whatever the crash point, the file holds the old or the new state, never a mix."""
    for n in range(8):
        for torn in (False, True):
            fs = SimulatedFileSystem()
            write_quorum_state("/n", STATE, fs)
            try:
                write_quorum_state("/n", {**STATE, "leaderEpoch": 9}, CrashAfter(fs, n))  # type: ignore[arg-type]
                finished = True
            except _Crash:
                finished = False
            fs.crash(random.Random(n), torn=torn)
            state = read_quorum_state("/n", fs)
            assert state is not None
            assert state["leaderEpoch"] == 9 if finished else state["leaderEpoch"] in (7, 9)


def test_log_writes_quorum_state_through_its_file_system() -> None:
    fs = SimulatedFileSystem()
    with SegmentedLog.open(fs, "/n") as log:
        assert log.read_quorum_state() is None
        log.write_quorum_state(STATE)
        assert log.read_quorum_state() == STATE
    assert read_quorum_state("/n", fs) == STATE


# -- meta.properties -------------------------------------------------------------------------


def test_format_writes_kafka_meta_properties(tmp_path: Path) -> None:
    log_dir = str(tmp_path / "n1")
    meta = format_log_dir(log_dir, cluster_id="cluster-A", node_id=3)
    text = (tmp_path / "n1" / "meta.properties").read_text()
    for line in ("version=1", "cluster.id=cluster-A", "node.id=3",
                 f"directory.id={meta.directory_id}"):
        assert line in text.splitlines()
    assert len(meta.directory_id) == 22  # Kafka's base64url UUID
    assert (tmp_path / "n1" / "__cluster_metadata-0").is_dir()
    assert read_meta_properties(log_dir) == meta


def test_directory_ids_are_random_or_seeded() -> None:
    assert new_directory_id() != new_directory_id()
    assert new_directory_id(random.Random(5)) == new_directory_id(random.Random(5))


def test_format_refuses_a_formatted_directory(tmp_path: Path) -> None:
    log_dir = str(tmp_path)
    meta = format_log_dir(log_dir, cluster_id="c", node_id=1)
    with pytest.raises(MetaPropertiesError, match="already exists"):
        format_log_dir(log_dir, cluster_id="c", node_id=1)
    assert format_log_dir(log_dir, cluster_id="c", node_id=1, ignore_formatted=True) == meta
    with pytest.raises(MetaPropertiesError, match=r"node\.id is 1 .* node\.id 2"):
        format_log_dir(log_dir, cluster_id="c", node_id=2, ignore_formatted=True)


def test_format_rejects_bad_ids(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cluster id"):
        format_log_dir(str(tmp_path), cluster_id="has space", node_id=1)
    with pytest.raises(ValueError, match="node id"):
        format_log_dir(str(tmp_path), cluster_id="c", node_id=-1)


def test_open_checks_node_and_cluster_ids(tmp_path: Path) -> None:
    log_dir = str(tmp_path / "n")
    fs = RealFileSystem()
    with pytest.raises(NotFormattedError, match="kraft-spark format"):
        SegmentedLog.open(fs, log_dir, node_id=1, cluster_id="c")
    format_log_dir(log_dir, cluster_id="c", node_id=1)
    path = os.path.join(log_dir, "meta.properties")
    with pytest.raises(MetaPropertiesError) as info:
        SegmentedLog.open(fs, log_dir, node_id=2, cluster_id="c")
    assert "node.id is 1" in str(info.value) and "node.id 2" in str(info.value)
    assert path in str(info.value)
    with pytest.raises(MetaPropertiesError) as info:
        SegmentedLog.open(fs, log_dir, node_id=1, cluster_id="other")
    assert "cluster.id is 'c'" in str(info.value) and "'other'" in str(info.value)
    assert path in str(info.value)
    with SegmentedLog.open(fs, log_dir, node_id=1, cluster_id="c") as log:
        assert log.meta is not None and log.meta.node_id == 1


def test_unreadable_meta_properties_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text("version=1\ncluster.id=c\n")
    with pytest.raises(MetaPropertiesError, match=r"missing node\.id, directory\.id"):
        read_meta_properties(str(tmp_path))
    (tmp_path / "meta.properties").write_text(
        "version=0\ncluster.id=c\nnode.id=1\ndirectory.id=x\n"
    )
    with pytest.raises(MetaPropertiesError, match="version 0"):
        read_meta_properties(str(tmp_path))


# -- the directory lock ----------------------------------------------------------------------

HOLD_LOCK = textwrap.dedent(
    """
    import sys, time
    from kraft_spark.log import RealFileSystem, SegmentedLog
    log = SegmentedLog.open(RealFileSystem(), sys.argv[1])
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    log.close()
    """
)

TRY_OPEN = textwrap.dedent(
    """
    import sys
    from kraft_spark.log import LogDirLockedError, RealFileSystem, SegmentedLog
    try:
        SegmentedLog.open(RealFileSystem(), sys.argv[1])
    except LogDirLockedError as exc:
        print(exc)
        sys.exit(3)
    """
)


def test_second_opener_in_the_same_process_fails(tmp_path: Path) -> None:
    fs = RealFileSystem()
    with SegmentedLog.open(fs, str(tmp_path)):
        with pytest.raises(LogDirLockedError) as info:
            SegmentedLog.open(RealFileSystem(), str(tmp_path))
        assert f"pid {os.getpid()}" in str(info.value)
        assert str(tmp_path / ".lock") in str(info.value)
    SegmentedLog.open(fs, str(tmp_path)).close()  # released on close


def test_another_process_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    log_dir = str(tmp_path)
    with SegmentedLog.open(RealFileSystem(), log_dir) as log:
        from tests.log.helpers import fill

        fill(log, [1])
        log.flush()
        before = sorted((p.name, p.stat().st_size) for p in tmp_path.rglob("*") if p.is_file())
        proc = subprocess.run([sys.executable, "-c", TRY_OPEN, log_dir], capture_output=True,
                              text=True, timeout=60, check=False)
        assert proc.returncode == 3, proc.stderr
        assert "is locked by another process" in proc.stdout
        assert f"pid {os.getpid()}" in proc.stdout
        after = sorted((p.name, p.stat().st_size) for p in tmp_path.rglob("*") if p.is_file())
        assert after == before


def test_opener_waits_for_the_lock_with_a_timeout(tmp_path: Path) -> None:
    log_dir = str(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, log_dir, "0.6"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(LogDirLockedError, match=r"after waiting 0\.1 s"):
            SegmentedLog.open(RealFileSystem(), log_dir, lock_timeout_s=0.1)
        start = time.monotonic()
        with SegmentedLog.open(RealFileSystem(), log_dir, lock_timeout_s=30):
            assert time.monotonic() - start < 30
    finally:
        holder.wait(timeout=60)
        if holder.stdout is not None:
            holder.stdout.close()


def test_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    log_dir = str(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, log_dir, "60"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait(timeout=60)
    holder.stdout.close()
    with SegmentedLog.open(RealFileSystem(), log_dir, lock_timeout_s=5) as log:
        assert json.dumps(log.epoch_entries()) == "[]"
