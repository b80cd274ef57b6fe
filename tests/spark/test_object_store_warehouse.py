"""A warehouse on an object store (``s3a://``): the materializer commits to it with delta-rs, with
the credentials and endpoint of the Spark configuration's Hadoop keys, exactly once, and keeps it
(checkpoints, compaction) without a Spark job.

The store is moto's S3 server on loopback: the S3 API over HTTP, conditional writes
(``If-None-Match``) included, which delta-rs relies on to take a table version. Reading the
tables back is delta-rs's too (Spark would need the hadoop-aws connector, which a deployment on
S3 brings and this machine's Spark does not have).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from bench.processes import serving
from kraft_spark.delta import DeltaMaterializer
from kraft_spark.delta import materializer as materializer_module
from kraft_spark.delta.tables import QUORUM_EVENTS, RECORDS, SNAPSHOT, TABLES
from tests.net.helpers import free_ports
from tests.spark import logdata

pytestmark = pytest.mark.spark

BUCKET = "kraft"
WAREHOUSE = f"s3a://{BUCKET}/warehouse"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server, a process of its own on a loopback port (in this process it would
    wait on the GIL that delta-rs's blocking calls hold), with the bucket made; stopped
    afterwards."""
    import boto3

    port = free_ports(1)[0]
    endpoint = f"http://127.0.0.1:{port}"
    moto = os.path.join(os.path.dirname(sys.executable), "moto_server")
    with serving([moto, "-H", "127.0.0.1", "-p", str(port)], port, "moto_server"):
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                     aws_secret_access_key="test", region_name="us-east-1").create_bucket(
            Bucket=BUCKET)
        yield endpoint


@pytest.fixture
def hadoop_conf(spark: Any, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch,
                tmp_path: Any) -> dict[str, str]:
    """The Spark configuration a user on S3 writes (``spark.hadoop.fs.s3a.*``), as the
    materializer reads it; each test in a warehouse of its own."""
    conf = {
        "spark.hadoop.fs.s3a.endpoint": s3_endpoint.removeprefix("http://"),
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.access.key": "test",
        "spark.hadoop.fs.s3a.secret.key": "test",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
    }
    monkeypatch.setattr(materializer_module, "spark_conf_of", lambda _spark: conf)
    return conf


def _rows(materializer: DeltaMaterializer, table: str) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    assert materializer.store is not None
    store = materializer.store
    return DeltaTable(store.uri(table), storage_options=store.storage_options()
                      ).to_pyarrow_table().to_pylist()


def test_an_s3_warehouse_is_materialized_in_process_exactly_once(
        spark: Any, hadoop_conf: dict[str, str], request: pytest.FixtureRequest) -> None:
    warehouse = f"{WAREHOUSE}/{request.node.name}"
    batches = logdata.log()
    materializer = DeltaMaterializer(spark, warehouse)
    assert materializer.in_process
    assert materializer.prepare() == dict.fromkeys(TABLES, 0)
    assert materializer.write(batches[:3], batches[2].next_offset) == batches[2].next_offset
    # A restart (a new materializer) resumes from the tables alone, and a replay of what is
    # already there adds nothing.
    again = DeltaMaterializer(spark, warehouse)
    assert again.table_offsets() == dict.fromkeys(TABLES, batches[2].next_offset)
    assert again.write(batches, logdata.end(batches)) == logdata.end(batches)
    assert again.write(batches, logdata.end(batches)) == logdata.end(batches)

    records = sorted((r["offset"], r["key"], r["value"]) for r in _rows(again, RECORDS))
    assert records == [(r[0], r[3], r[4]) for r in logdata.record_rows(batches)]
    snapshot = {r["key"]: r["value"] for r in _rows(again, SNAPSHOT)}
    assert snapshot == {k: v[0] for k, v in logdata.replay(batches).items()}
    leaders = sorted((r["offset"], r["leader_id"]) for r in _rows(again, QUORUM_EVENTS))
    assert leaders == [(0, 0), (8, 1)]


def test_an_s3_warehouse_is_checkpointed_and_compacted_without_spark(
        spark: Any, hadoop_conf: dict[str, str], request: pytest.FixtureRequest) -> None:
    warehouse = f"{WAREHOUSE}/{request.node.name}"
    batches = logdata.log()
    materializer = DeltaMaterializer(spark, warehouse)
    group = f"s3-upkeep-{id(materializer)}"
    spark.sparkContext.setJobGroup(group, "s3 warehouse upkeep")
    try:
        for i in range(1, len(batches) + 1):
            materializer.write(batches[:i], batches[i - 1].next_offset, (RECORDS,))
        assert materializer.checkpoint(RECORDS, min_commits=5) == len(batches)
        assert materializer.checkpoint(RECORDS, min_commits=1) is None  # nothing since
        done = materializer.compact(RECORDS, min_files=3)
    finally:
        spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []
    assert done is not None and done.files_added == 1
    assert done.files_removed == done.files_before >= 3
    # The compaction moved no offset; the rows are all there once.
    assert DeltaMaterializer(spark, warehouse).table_offsets()[RECORDS] == logdata.end(batches)
    offsets = sorted(r["offset"] for r in _rows(materializer, RECORDS))
    assert offsets == [r[0] for r in logdata.record_rows(batches)]


def test_a_stale_second_writer_on_s3_writes_nothing_twice(
        spark: Any, hadoop_conf: dict[str, str], request: pytest.FixtureRequest) -> None:
    """Two materializers of one cluster on one S3 warehouse (a driver restarted while the old
    one still commits), both caching offset 0: the second finds the first's identical commit
    recorded in the table and skips its own, so no row is written twice."""
    warehouse = f"{WAREHOUSE}/{request.node.name}"
    batches = logdata.log()
    first = DeltaMaterializer(spark, warehouse)
    second = DeltaMaterializer(spark, warehouse)
    first.prepare()
    second.prepare()  # both now cache offset 0 for every table
    end = logdata.end(batches)
    assert first.write(batches, end, (RECORDS,)) == 0  # the others not yet written
    assert second.write(batches, end, (RECORDS,)) == 0  # its commit is found made: skipped
    assert sorted(r["offset"] for r in _rows(first, RECORDS)) == [
        r[0] for r in logdata.record_rows(batches)]


def test_a_missing_bucket_is_named_with_the_fix(
        spark: Any, hadoop_conf: dict[str, str]) -> None:
    from kraft_spark.delta.table_store import StoreRefused

    with pytest.raises(StoreRefused) as caught:
        DeltaMaterializer(spark, "s3a://no-such-bucket/warehouse").prepare()
    message = str(caught.value)
    assert message.startswith("s3a://no-such-bucket/warehouse: the object store refused")
    assert "aws_access_key_id" in message and "bucket or container exists" in message
