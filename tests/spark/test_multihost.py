"""Disposable executors on a multi-host rig (issue 24): a standalone master and workers on
their own loopback addresses, each with its own disk; one host is lost, then every host, and no
acknowledged append is lost (the second time the quorum is rebuilt from the warehouse). The
scenario is bench/multihost.py, which the README's session runs as a script.

The same scenario on workers whose Python cannot import kraft_spark, the application shipping
its environment (``kraft-spark pack-env``, ``kraft-spark run --env-archive``; issue 43), is
marked slow as well: the archive's build and each executor's unpacking of it add minutes."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from bench.multihost import ARCHIVE_PYTHON, run

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


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_workers_without_the_project_run_the_shipped_environment(tmp_path: Path) -> None:
    if importlib.util.find_spec("venv_pack") is None:
        pytest.skip("venv-pack is not installed (pip install '.[pack]')")
    figures = run(tmp_path, clean_workers=True)
    print(f"\n[figure] {figures}")
    # The workers' own Python (conf/spark-env.sh) lacks the project.
    assert figures["worker_import"] == "ModuleNotFoundError: No module named 'kraft_spark'"
    assert (tmp_path / "conf" / "spark-env.sh").read_text() == (
        f"PYSPARK_PYTHON={tmp_path / 'worker-python' / 'bin' / 'python'}\n")
    assert figures["acknowledged"] == 50
    assert figures["records_rows"] == 50
    assert figures["app_exit"] == 0
    log = (tmp_path / "app.log").read_text(errors="replace")
    assert "rebuilding the quorum from the warehouse" in log
    assert "runs on 127.0.0.5:" in log
    # Every voter checked ran the archive's interpreter in its host's work directory, with the
    # compiled codec from the archive unpacked there (bench/multihost.py's check_voters).
    voters = figures["voter_processes"]
    assert {v["host"] for v in voters} >= {
        "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7",
        "127.0.0.8"}
    for voter in voters:
        assert voter["python"] == ARCHIVE_PYTHON, voter
        host_dir = tmp_path / f"host-{voter['host']}" / "work"
        assert voter["codec"].startswith(f"{host_dir}/"), voter
        assert "/environment/lib/" in voter["codec"], voter
    # Passed: the executors' unpacked copies of the archive (about 550 MB a host) go now, not
    # with pytest's old temporary directories.
    for host in tmp_path.glob("host-*"):
        shutil.rmtree(host / "work", ignore_errors=True)
