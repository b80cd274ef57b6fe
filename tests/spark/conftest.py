"""One SparkSession (local[2], Delta) for the whole test session; see kraft_spark.spark_session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


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
