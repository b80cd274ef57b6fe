"""``controller.quorum.bootstrap.servers`` in place of ``controller.quorum.voters``: parsing,
and a quorum that cannot be found named with its fix (the found case runs against real nodes
in tests/integration/test_dynamic_quorum.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kraft_spark.commands.bootstrap_servers import discover_voters
from kraft_spark.net.config import NodeConfig
from kraft_spark.raft.config import ConfigError
from tests.net.helpers import free_ports


def test_bootstrap_servers_replace_the_voter_list_and_one_of_them_is_needed() -> None:
    config = NodeConfig.from_properties({
        "node.id": "4", "log.dirs": "/tmp/x", "listeners": "127.0.0.1:9094",
        "controller.quorum.bootstrap.servers": "127.0.0.1:9090, CONTROLLER://127.0.0.1:9091",
    })
    assert config.voters == {}
    assert config.bootstrap_servers == (("127.0.0.1", 9090), ("127.0.0.1", 9091))
    with pytest.raises(ConfigError, match=r"controller\.quorum\.bootstrap\.servers"):
        NodeConfig.from_properties({"node.id": "4", "log.dirs": "/tmp/x",
                                    "listeners": "127.0.0.1:9094"})
    static = NodeConfig.from_properties({"node.id": "1", "log.dirs": "/tmp/x",
                                         "controller.quorum.voters": "1@127.0.0.1:9091"})
    assert static.voters == {1: ("127.0.0.1", 9091)} and static.bootstrap_servers == ()


def test_a_quorum_nobody_answers_for_is_named_with_the_fix(tmp_path: Path) -> None:
    port = free_ports(1)[0]  # nothing listens there
    config = NodeConfig.from_properties({
        "node.id": "4", "log.dirs": str(tmp_path), "listeners": "127.0.0.1:9094",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{port}",
    })
    with pytest.raises(ConfigError) as caught:
        asyncio.run(discover_voters(config, timeout_s=1.0))
    text = str(caught.value)
    assert f"controller.quorum.bootstrap.servers=127.0.0.1:{port}" in text
    assert "check the addresses and that the quorum runs" in text
