"""Which voters the application's etcd front forwards to (driver/etcd_endpoint.py): the running
generation's, from their hellos, the leader's first; and no front when it is turned off or
the voters have a certificate."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from driver.config import AppConfig
from driver.etcd_endpoint import leader_first, start_etcd_front, voter_etcd_addresses
from kraft_spark.tls_config import TlsConfig

HELLOS = {0: {"etcd": "10.0.0.1:2400"}, 1: {"http": "http://10.0.0.2:8082"},
          2: {"etcd": "10.0.0.3:2402"}, 3: {"etcd": "10.0.0.4:2403"}}


def app(leader: int, config: AppConfig | None = None) -> Any:
    observer = SimpleNamespace(core=SimpleNamespace(known_leader=lambda: leader))
    return SimpleNamespace(config=config or AppConfig(), _tasks=HELLOS, _observer=observer)


def test_the_leaders_node_first_then_the_others_in_order() -> None:
    assert voter_etcd_addresses(app(-1)) == {0: "10.0.0.1:2400", 2: "10.0.0.3:2402",
                                             3: "10.0.0.4:2403"}
    assert leader_first(app(2)) == ["10.0.0.3:2402", "10.0.0.1:2400", "10.0.0.4:2403"]
    assert leader_first(app(-1)) == ["10.0.0.1:2400", "10.0.0.3:2402", "10.0.0.4:2403"]
    assert leader_first(app(1)) == ["10.0.0.1:2400", "10.0.0.3:2402", "10.0.0.4:2403"]


@pytest.mark.parametrize("off", [{"etcd_port": -1}, {"voter_etcd_base_port": -1},
                                 {"voter_http_base_port": -1},
                                 {"tls": TlsConfig("node.pem", "node.key", "ca.pem")}])
def test_no_front_when_turned_off_or_over_tls(off: dict[str, Any]) -> None:
    assert start_etcd_front(app(0, replace(AppConfig(), **off))) is None
