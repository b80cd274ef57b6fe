"""Disposable executors on a multi-host rig (issue 24): a standalone master and workers on
their own loopback addresses, each with its own disk; one host is lost, then every host, and no
acknowledged append is lost (the second time the quorum is rebuilt from the warehouse). The
scenario is bench/multihost.py, which the README's session runs as a script."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.multihost import run

pytestmark = [pytest.mark.spark, pytest.mark.multihost, pytest.mark.timeout(900)]


def test_hosts_lost_one_then_all_lose_no_acknowledged_append(tmp_path: Path) -> None:
    figures = run(tmp_path)
    assert figures["acknowledged"] == 50
    assert figures["records_rows"] == 50  # each acknowledged append once, nothing else
    assert figures["app_exit"] == 0
    log = (tmp_path / "app.log").read_text(errors="replace")
    assert "rebuilding the quorum from the warehouse" in log
    assert "runs on 127.0.0.5:" in log  # the relaunched voter on the new host
    assert not any(p.name.startswith("host-127.0.0.3") for p in tmp_path.iterdir())
