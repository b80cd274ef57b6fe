"""``<warehouse>/_kraft_spark/endpoint.json``: the driver's HTTP address for clients that cannot
know where it runs (``--deploy-mode cluster``), and ``--warehouse`` on the commands that take an
address. The driver's side runs in tests/spark/test_spark_submit.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kraft_spark import app_endpoint
from kraft_spark.cli import build_parser
from kraft_spark.errors import CommandError


def test_a_wildcard_bind_is_advertised_by_the_drivers_address() -> None:
    assert app_endpoint.advertised_url("0.0.0.0", 8080, "10.1.2.3") == "http://10.1.2.3:8080"
    assert app_endpoint.advertised_url("127.0.0.1", 81, "10.1.2.3") == "http://127.0.0.1:81"
    assert app_endpoint.advertised_url("::", 8080, "fd00::5") == "http://[fd00::5]:8080"


def test_published_then_withdrawn(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    app_endpoint.withdraw(warehouse, None)  # never published here: nothing to remove
    app_endpoint.publish(warehouse, None, {"http": "http://10.0.0.7:8080", "cluster_id": "c"})
    recorded = json.loads((tmp_path / "wh" / "_kraft_spark" / "endpoint.json").read_text())
    assert recorded["cluster_id"] == "c"
    assert app_endpoint.http_url(f"file://{warehouse}") == "http://10.0.0.7:8080"
    app_endpoint.withdraw(warehouse, None)
    with pytest.raises(CommandError, match="no address recorded") as caught:
        app_endpoint.http_url(warehouse)
    assert caught.value.exit_code == 1


def test_a_failed_start_leaves_a_running_applications_record(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    (warehouse / "_kraft_spark").mkdir(parents=True)
    (warehouse / "_kraft_spark" / "endpoint.json").write_text('{"http": "http://h:1"}')
    app_endpoint.withdraw(str(warehouse), None)
    assert app_endpoint.http_url(str(warehouse)) == "http://h:1"


@pytest.mark.parametrize(("argv", "attribute"), [
    (["kv", "get", "k"], "endpoint"),
    (["lease", "grant", "10"], "endpoint"),
    (["resize", "--voters", "5"], "url"),
])
def test_commands_find_the_address_from_the_warehouse(
        tmp_path: Path, argv: list[str], attribute: str) -> None:
    warehouse = str(tmp_path / "wh")
    app_endpoint.publish(warehouse, None, {"http": "http://10.0.0.7:8080"})
    args = build_parser().parse_args([*argv, "--warehouse", warehouse])
    app_endpoint.resolve_args(args)
    assert getattr(args, attribute) == "http://10.0.0.7:8080"
