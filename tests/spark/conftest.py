"""One SparkSession (local[2], Delta) for the whole test session; see kraft_spark.spark_session."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest


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
