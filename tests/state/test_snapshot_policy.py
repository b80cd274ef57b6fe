"""When a snapshot is due (kraft_spark/state/policy.py): Kafka's bytes and time rules, and the
ratio to the newest snapshot's size that keeps a large state from being rewritten every 20 MiB
of records."""

from __future__ import annotations

import pytest

from kraft_spark.raft.config import ConfigError
from kraft_spark.state.policy import MIB, SnapshotConfig, snapshot_due


def due(config: SnapshotConfig, bytes_since: int, last: int = 0, ms_since: int = 0,
        applied: bool = True) -> bool:
    return snapshot_due(config, bytes_since=bytes_since, applied_since=applied,
                        ms_since=ms_since, last_snapshot_bytes=last)


def test_kafkas_rule_while_the_state_is_small() -> None:
    config = SnapshotConfig()
    assert not due(config, 20 * MIB - 1)
    assert due(config, 20 * MIB)
    assert due(config, 20 * MIB, last=5 * MIB)  # 4 x 5 MiB is the 20 MiB floor itself
    assert not due(config, 20 * MIB, applied=False)
    assert due(config, 1, ms_since=3_600_000)  # the hour, whatever the size


def test_a_large_state_waits_for_four_times_its_snapshot() -> None:
    config = SnapshotConfig()
    last = 154 * 1000 * 1000  # the 733,200-key snapshot that was rewritten every 20 MiB
    assert not due(config, 20 * MIB, last=last)
    assert not due(config, 4 * last - 1, last=last)
    assert due(config, 4 * last, last=last)
    assert due(config, 1, last=last, ms_since=3_600_000)


def test_the_ratio_is_a_setting_and_zero_is_kafkas_rule_alone() -> None:
    assert SnapshotConfig.from_properties({}).snapshot_log_ratio == 4.0
    two = SnapshotConfig.from_properties({"kraft.snapshot.log.ratio": "2"})
    assert due(two, 200, last=100) is False  # below the 20 MiB floor
    assert due(two, 2 * 30 * MIB, last=30 * MIB) and not due(two, 59 * MIB, last=30 * MIB)
    off = SnapshotConfig.from_properties({"kraft.snapshot.log.ratio": "0"})
    assert due(off, 20 * MIB, last=500 * MIB)


@pytest.mark.parametrize("raw", ["-1", "x", "1e9"])
def test_a_bad_ratio_is_named(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"kraft.snapshot.log.ratio must be a number from 0 "):
        SnapshotConfig.from_properties({"kraft.snapshot.log.ratio": raw})
