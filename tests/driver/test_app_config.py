"""The Spark application's properties (driver/app.py: config_from_properties, parse_args)."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.app import FULL_CYCLE_MAX_SHARE, full_cycle_wait
from driver.config import _APP_KEYS, AppConfig, config_from_properties, parse_args
from kraft_spark.config_keys import APP_KEYS
from kraft_spark.properties import load_properties
from kraft_spark.raft.config import QuorumConfig

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_file_parses_to_the_documented_defaults() -> None:
    cfg = config_from_properties(load_properties(str(REPO / "conf" / "kraft-spark.properties")))
    assert (cfg.voters, cfg.http_host, cfg.http_port, cfg.voter_base_port) == (
        3, "127.0.0.1", 8080, 9093)
    assert cfg.materialize_interval_s == 1.0
    assert cfg.compact_min_files == 100
    assert cfg.http_token is None  # empty value: unset
    assert cfg.log_preallocate is True
    assert (cfg.voter_etcd_base_port, cfg.etcd_port) == (0, 0)  # etcd's API, on free ports
    assert QuorumConfig.from_properties(cfg.quorum_properties).fetch_max_wait_ms == 500


def test_node_settings_reach_the_voters() -> None:
    cfg = config_from_properties({
        "kraft.quorum.hw.wakeup.delay.ms": "0",
        "kraft.log.flush.inline.max.ms": "0.5",
        "kraft.log.preallocate": "False",
        "controller.quorum.fetch.max.wait.ms": "250",
        "controller.quorum.voters": "0@h:1",  # the application assigns voters itself
    })
    quorum = QuorumConfig.from_properties(cfg.quorum_properties)
    assert (quorum.hw_wakeup_delay_ms, quorum.fetch_max_wait_ms) == (0, 250)
    assert "controller.quorum.voters" not in cfg.quorum_properties
    assert cfg.inline_flush_max_ms == 0.5
    assert cfg.log_preallocate is False


def test_milliseconds_become_seconds() -> None:
    cfg = config_from_properties({"kraft.materialize.interval.ms": "250",
                                  "kraft.delta.warmup.wait.ms": "1500",
                                  "kraft.materialize.snapshot.interval.ms": "30000",
                                  "kraft.http.header.timeout.ms": "2500"})
    assert (cfg.materialize_interval_s, cfg.delta_warm_up_wait_s) == (0.25, 1.5)
    assert cfg.materialize_full_interval_s == 30.0
    assert cfg.http_header_timeout_s == 2.5


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"kraft.htp.port": "8080"}, "unknown setting 'kraft.htp.port'; the kraft.* settings are"),
        ({"kraft.a": "1", "kraft.b": ""}, "unknown settings 'kraft.a', 'kraft.b'"),
        ({"kraft.http.port": "eighty"}, "kraft.http.port must be an integer, got 'eighty'"),
        ({"kraft.materialize.interval.ms": "soon"},
         "kraft.materialize.interval.ms must be a number, got 'soon'"),
        ({"kraft.delta.compact.min.files": "-1"}, "kraft.delta.compact.min.files must be ≥ 0"),
        ({"kraft.http.max.connections": "0"}, "kraft.http.max.connections must be ≥ 1"),
        ({"kraft.http.header.timeout.ms": "0"}, "kraft.http.header.timeout.ms must be ≥ 1"),
        ({"kraft.etcd.port": "-2"}, "kraft.etcd.port must be ≥ -1"),
        ({"kraft.log.preallocate": "yes"}, "kraft.log.preallocate must be true or false"),
        ({"controller.quorum.fetch.max.wait.ms": "x"}, "controller.quorum.fetch.max.wait.ms"),
        ({"controller.quorum.fetch.timeout": "1"}, "unknown quorum setting"),
    ],
)
def test_bad_settings_name_the_key(props: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as info:
        config_from_properties(props)
    assert message in str(info.value)


def test_a_node_only_key_is_accepted_and_not_used() -> None:
    assert config_from_properties({"kraft.http.listener": "127.0.0.1:8081"}) == AppConfig(
        quorum_properties={})


def test_parse_args_reports_the_file_and_exits(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "app.properties"
    conf.write_text("kraft.voters=three\n", encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        parse_args(["--config", str(conf)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"{conf}: kraft.voters must be an integer, got 'three'" in err


def test_command_line_flags_win_over_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "app.properties"
    conf.write_text("kraft.voters=5\nkraft.http.port=9000\n", encoding="utf-8")
    cfg = parse_args(["--config", str(conf), "--voters", "3", "--data-dir", str(tmp_path)])
    assert (cfg.voters, cfg.http_port, cfg.data_dir) == (3, 9000, str(tmp_path))


def test_overlapping_voter_port_ranges_are_refused(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "app.properties"
    conf.write_text("kraft.voter.http.base.port=8081\nkraft.voter.etcd.base.port=8083\n",
                    encoding="utf-8")
    with pytest.raises(SystemExit):
        parse_args(["--config", str(conf)])
    assert ("kraft.voter.http.base.port=8081 and kraft.voter.etcd.base.port=8083: 3 voters' "
            "ports overlap") in capsys.readouterr().err
    cfg = parse_args(["--config", str(conf), "--voters", "2", "--data-dir", str(tmp_path)])
    assert (cfg.voter_http_base_port, cfg.voter_etcd_base_port) == (8081, 8083)


def test_the_application_reads_exactly_its_registered_keys() -> None:
    assert set(_APP_KEYS) == APP_KEYS


def test_slow_snapshot_cycles_are_spaced_out() -> None:
    # A quick cycle (nothing new, or a small MERGE): the configured interval.
    assert full_cycle_wait(5.0, 0.2) == 5.0
    # A 2 s MERGE under load: 18 s until the next, so cycles take 10 % of the time.
    wait = full_cycle_wait(5.0, 2.0)
    assert wait == pytest.approx(18.0)
    assert 2.0 / (2.0 + wait) == pytest.approx(FULL_CYCLE_MAX_SHARE)
