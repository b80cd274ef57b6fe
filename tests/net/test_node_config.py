"""``NodeConfig.from_properties``: the node-level keys beyond Kafka's quorum timings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kraft_spark.http_auth import Identity, Scope
from kraft_spark.net.config import NodeConfig
from kraft_spark.raft.config import ConfigError
from kraft_spark.secret_files import write_secret

# No event loop: the same code on both loops (so it runs once, on asyncio's).
pytestmark = pytest.mark.loop_free

BASE = {
    "node.id": "1",
    "log.dirs": "/tmp/unused",
    "controller.quorum.voters": "0@127.0.0.1:9093,1@127.0.0.1:9094,2@127.0.0.1:9095",
}


def test_defaults() -> None:
    config = NodeConfig.from_properties(BASE)
    assert (config.host, config.port) == ("127.0.0.1", 9094)
    assert config.inline_flush_max_ms == 2.0
    assert config.http_listener is None and config.http_credentials is None
    assert config.quorum.hw_wakeup_delay_ms == 5


def test_inline_flush_and_hw_wakeup_settings() -> None:
    config = NodeConfig.from_properties({
        **BASE, "kraft.log.flush.inline.max.ms": "0.5", "kraft.quorum.hw.wakeup.delay.ms": "0",
    })
    assert config.inline_flush_max_ms == 0.5
    assert config.quorum.hw_wakeup_delay_ms == 0


@pytest.mark.parametrize("value, fragment", [("fast", "number of milliseconds"),
                                             ("-1", "must be ≥ 0")])
def test_a_bad_inline_flush_setting_names_the_key(value: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=r"kraft\.log\.flush\.inline\.max\.ms") as caught:
        NodeConfig.from_properties({**BASE, "kraft.log.flush.inline.max.ms": value})
    assert fragment in str(caught.value)


def test_log_preallocation_is_on_by_default_and_can_be_turned_off() -> None:
    assert NodeConfig.from_properties(BASE).log_preallocate is True
    off = NodeConfig.from_properties({**BASE, "kraft.log.preallocate": " FALSE "})
    assert off.log_preallocate is False
    with pytest.raises(ConfigError, match=r"kraft\.log\.preallocate must be true or false"):
        NodeConfig.from_properties({**BASE, "kraft.log.preallocate": "yes"})


def test_a_lost_disk_must_be_said_in_so_many_words() -> None:
    """``node.disk.lost`` lets a wiped voter rejoin without voting: a typo must stop the node,
    not silently mean false (it then could vote twice in an epoch)."""
    assert NodeConfig.from_properties(BASE).disk_lost is False
    assert NodeConfig.from_properties({**BASE, "node.disk.lost": "TRUE"}).disk_lost is True
    assert NodeConfig.from_properties({**BASE, "node.disk.lost": ""}).disk_lost is False
    with pytest.raises(ConfigError, match=r"node\.disk\.lost must be true or false, got 'ture'"):
        NodeConfig.from_properties({**BASE, "node.disk.lost": "ture"})


def test_http_listener_and_its_token() -> None:
    config = NodeConfig.from_properties({
        **BASE, "kraft.http.listener": "127.0.0.1:0", "kraft.http.token": "s3cret",
    })
    assert config.http_listener == ("127.0.0.1", 0)
    assert config.http_credentials is not None
    assert config.http_credentials.identify(b"s3cret") == Identity("token", Scope.ADMIN)
    assert "s3cret" not in repr(config)
    # Without a listener the token is the Spark application's sidecar setting: not ours.
    assert NodeConfig.from_properties({**BASE, "kraft.http.token": "x"}).http_credentials is None


def test_http_beyond_loopback_needs_credentials_or_an_explicit_opt_out(tmp_path: Path) -> None:
    outside = {**BASE, "kraft.http.listener": "0.0.0.0:8080"}
    with pytest.raises(ConfigError, match=r"without authentication: set "
                       r"kraft\.http\.credentials\.file.*kraft\.http\.insecure=true"):
        NodeConfig.from_properties(outside)
    assert NodeConfig.from_properties({**outside, "kraft.http.insecure": "true"}
                                      ).http_credentials is None
    path = tmp_path / "creds"
    write_secret(str(path), "read r1 dash\nadmin a1\n")
    config = NodeConfig.from_properties({**outside, "kraft.http.credentials.file": str(path)})
    assert config.http_credentials is not None
    assert config.http_credentials.identify(b"r1") == Identity("dash", Scope.READ)
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="too open"):
        NodeConfig.from_properties({**outside, "kraft.http.credentials.file": str(path)})


def test_a_misspelt_kraft_key_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"unknown setting 'kraft\.http\.listner'; the kraft\.\*"):
        NodeConfig.from_properties({**BASE, "kraft.http.listner": "127.0.0.1:8081"})


def test_the_applications_keys_and_kafkas_other_names_are_accepted() -> None:
    # One file may serve both the Spark application and `kraft-spark node`.
    config = NodeConfig.from_properties({
        **BASE, "kraft.data.dir": "data", "kraft.delta.compact.min.files": "100",
        "process.roles": "controller",
    })
    assert config.node_id == 1


def test_connection_limits() -> None:
    config = NodeConfig.from_properties(BASE)
    assert (config.max_connections, config.connections_max_idle_ms) == (1000, 600_000)
    config = NodeConfig.from_properties(
        {**BASE, "max.connections": "50", "connections.max.idle.ms": "30000"})
    assert (config.max_connections, config.connections_max_idle_ms) == (50, 30_000)


@pytest.mark.parametrize("props, fragment", [
    ({"max.connections": "0"}, "max.connections must be a positive integer, got '0'"),
    ({"max.connections": "many"}, "max.connections must be a positive integer, got 'many'"),
    ({"connections.max.idle.ms": "1000"},
     "connections.max.idle.ms (1000) must be at least controller.quorum.fetch.timeout.ms (2000)"),
    ({"controller.quorum.fetch.max.wait.ms": "2000"},
     "fetch.max.wait.ms (2000) must be below controller.quorum.request.timeout.ms (2000)"),
    ({"controller.quorum.fetch.timeout.ms": "400"},
     "fetch.max.wait.ms (500) must be below controller.quorum.fetch.timeout.ms (400)"),
])
def test_settings_that_would_disturb_the_quorum_are_refused(
    props: dict[str, str], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        NodeConfig.from_properties({**BASE, **props})
