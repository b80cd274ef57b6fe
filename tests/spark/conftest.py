"""One SparkSession (local[2], Delta) for the whole test session; see kraft_spark.spark_session."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# How much of each application log a failed test shows.
LOG_TAIL_LINES = 60


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test shows the end of every application log under its ``tmp_path``
    (``app.log``: the driver's output with the voters' and executors' lines), so a failure
    seen once under full load can be read, not only re-run."""
    outcome = yield
    report = outcome.get_result()
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if not report.failed or not isinstance(tmp_path, Path):
        return
    for log in sorted(tmp_path.rglob("app.log")):
        lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        report.sections.append((f"last {len(lines)} lines of {log}", "\n".join(lines)))


@pytest.fixture(autouse=True)
def _collect_garbage_after_each_test() -> Iterator[None]:
    """A Spark test that fails half-way can leave sockets or files unclosed; collecting here
    reports such a leak (ResourceWarning, an error in this suite) against the test that made
    it, not against whichever unrelated test the garbage collector happens to run in."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from kraft_spark.spark_session import build_spark

    session = build_spark(
        "kraft-spark-tests",
        master="local[2]",
        warehouse_dir=tmp_path_factory.mktemp("spark-warehouse"),
        extra_conf={
            "spark.ui.enabled": "false",
            # Tiny tables: fewer tasks per Delta state reconstruction and per MERGE.
            "spark.databricks.delta.snapshotPartitions": "1",
            "spark.sql.shuffle.partitions": "2",
        },
    )
    yield session
    session.stop()
