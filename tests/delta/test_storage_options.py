"""delta-rs's storage options from the Hadoop keys a Spark user wrote, and which warehouses the
materializer takes in process (``table_store.store_for``)."""

from __future__ import annotations

import os

from kraft_spark.delta.storage_options import served_by_delta_rs, storage_options
from kraft_spark.delta.table_store import TableStore, store_for

S3A = {
    "spark.hadoop.fs.s3a.access.key": "AK",
    "spark.hadoop.fs.s3a.secret.key": "SK",
    "spark.hadoop.fs.s3a.endpoint": "minio.internal:9000",
    "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    "spark.hadoop.fs.s3a.path.style.access": "true",
    "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
    "spark.executor.memory": "1g",  # not Hadoop's: ignored
}


def test_s3a_keys_map_to_delta_rs_options() -> None:
    assert storage_options("s3a://bucket/kraft", S3A) == {
        "aws_access_key_id": "AK",
        "aws_secret_access_key": "SK",
        "aws_region": "eu-west-1",
        "aws_endpoint_url": "http://minio.internal:9000",
        "aws_allow_http": "true",
        "aws_virtual_hosted_style_request": "false",
    }
    # TLS by default; an endpoint with a scheme is taken as written.
    assert storage_options("s3://b/k", {"spark.hadoop.fs.s3a.endpoint": "s3.example.com"}) == {
        "aws_endpoint_url": "https://s3.example.com"}
    assert storage_options("s3://b/k", {"spark.hadoop.fs.s3a.endpoint": "https://x:1"}) == {
        "aws_endpoint_url": "https://x:1"}


def test_virtual_hosted_style_puts_the_bucket_in_the_endpoint() -> None:
    conf = {**S3A, "spark.hadoop.fs.s3a.path.style.access": "false"}
    options = storage_options("s3a://bucket/kraft", conf)
    assert options["aws_endpoint_url"] == "http://bucket.minio.internal:9000"
    assert options["aws_virtual_hosted_style_request"] == "true"


def test_per_bucket_s3a_keys_override_the_global_ones() -> None:
    conf = {**S3A, "spark.hadoop.fs.s3a.bucket.logs.access.key": "LOGS",
            "spark.hadoop.fs.s3a.bucket.other.access.key": "OTHER"}
    assert storage_options("s3a://logs/kraft", conf)["aws_access_key_id"] == "LOGS"
    assert storage_options("s3a://bucket/kraft", conf)["aws_access_key_id"] == "AK"


def test_azure_and_gcs_keys() -> None:
    host = "acct.dfs.core.windows.net"
    conf = {
        f"spark.hadoop.fs.azure.account.key.{host}": "KEY",
        "spark.hadoop.fs.azure.account.oauth2.client.id": "CID",
        "spark.hadoop.fs.azure.account.oauth2.client.secret": "CS",
        "spark.hadoop.fs.azure.account.oauth2.client.endpoint":
            "https://login.microsoftonline.com/TENANT/oauth2/token",
        "spark.hadoop.google.cloud.auth.service.account.json.keyfile": "/etc/gcs.json",
    }
    assert storage_options(f"abfss://container@{host}/kraft", conf) == {
        "azure_storage_account_name": "acct",
        "azure_storage_account_key": "KEY",
        "azure_client_id": "CID",
        "azure_client_secret": "CS",
        "azure_tenant_id": "TENANT",
    }
    assert storage_options("gs://bucket/kraft", conf) == {
        "google_service_account": "/etc/gcs.json"}
    assert storage_options("hdfs://nn:8020/kraft", conf) == {}  # HADOOP_CONF_DIR, read by delta-rs


def test_which_warehouses_delta_rs_serves(tmp_path: os.PathLike[str]) -> None:
    for uri in ("s3a://b/k", "s3://b/k", "gs://b/k", "abfss://c@a.dfs.core.windows.net/k",
                "az://c/k", "hdfs://nn:8020/k", "viewfs://cluster/k"):
        assert served_by_delta_rs(uri), uri
        store = store_for(uri, {})
        assert store is not None and not store.local and store.uri("records") == f"{uri}/records"
    for uri in ("wasbs://c@a.blob.core.windows.net/k", "oss://b/k", "custom://x/k"):
        assert not served_by_delta_rs(uri) and store_for(uri, {}) is None, uri
    local = store_for(str(tmp_path), {})
    assert local == TableStore(os.path.abspath(tmp_path)) and local.local
    assert store_for(f"file://{tmp_path}/", {}) == TableStore(os.path.abspath(tmp_path))
