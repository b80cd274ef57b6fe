"""The materializer against real object-store servers on loopback: `make object-store-check`.

The suite's S3 is moto (tests/spark/test_object_store_warehouse.py). Here it is versitygw, an
S3 gateway over a directory (Apache-2.0, built with ``go install``), and Azurite, Microsoft's
Azure Storage emulator (npm). Credentials are given as a Spark user gives them
(``spark.hadoop.fs.s3a.*``, ``fs.azure.account.key.*``) in a real ``SparkConf``. For each
warehouse: the three tables written call by call, a restart that resumes from the tables alone,
a checkpoint and a compaction of ``records``, and every row read back against the log.

The tools go to ``.cache/object-stores`` (versitygw about 85 s to build the first time,
Azurite about 15 s to install); the report to ``bench/results/object-stores-<time>.md``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.processes import serving

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "object-stores"
VERSITYGW = "github.com/versity/versitygw/cmd/versitygw@v1.8.0"
AZURITE = "azurite@3.35.0"
# Azurite's well-known development account (its documentation's, not a secret).
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
             "KBHBeksoGMGw==")
BUCKET = "kraft"


def say(line: str) -> None:
    print(line, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_tools() -> tuple[Path, Path]:
    """versitygw and Azurite under CACHE, installed when missing."""
    bin_dir = CACHE / "bin"
    versitygw = bin_dir / "versitygw"
    if not versitygw.exists():
        say(f"building versitygw ({VERSITYGW}) with go install: about 85 s the first time")
        env = {**os.environ, "GOBIN": str(bin_dir)}
        subprocess.run(["go", "install", VERSITYGW], check=True, env=env)
    azurite = CACHE / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    if not azurite.exists():
        say(f"installing {AZURITE} with npm: about 15 s the first time")
        (CACHE / "azurite").mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--silent", "--prefix", str(CACHE / "azurite"),
                        AZURITE], check=True)
    return versitygw, azurite


def make_container(port: int) -> None:
    from azure.storage.blob import BlobServiceClient  # type: ignore[import-not-found,unused-ignore]

    conn = (f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{port}/{AZURE_ACCOUNT};")
    BlobServiceClient.from_connection_string(conn).create_container(BUCKET)


def check(spark: Any, warehouse: str) -> dict[str, Any]:
    """Materialize the test log into ``warehouse`` and read it back; the figures of one row."""
    from deltalake import DeltaTable

    from kraft_spark.delta import DeltaMaterializer
    from kraft_spark.delta.tables import RECORDS, SNAPSHOT, TABLES
    from tests.spark import logdata

    batches = logdata.log()
    started = time.monotonic()
    materializer = DeltaMaterializer(spark, warehouse)
    assert materializer.in_process and materializer.store is not None
    materializer.prepare()
    for i in range(1, len(batches) + 1):
        materializer.write(batches[:i], batches[i - 1].next_offset)
    again = DeltaMaterializer(spark, warehouse)
    offsets = again.table_offsets()
    checkpoint = again.checkpoint(RECORDS, min_commits=3)
    compaction = again.compact(RECORDS, min_files=3)
    store = materializer.store

    def rows(table: str) -> list[dict[str, Any]]:
        return list(DeltaTable(store.uri(table), storage_options=store.storage_options())
                    .to_pyarrow_table().to_pylist())

    records = sorted(r["offset"] for r in rows(RECORDS))
    snapshot = {r["key"]: r["value"] for r in rows(SNAPSHOT)}
    ok = (records == [r[0] for r in logdata.record_rows(batches)]
          and snapshot == {k: v[0] for k, v in logdata.replay(batches).items()}
          and offsets == dict.fromkeys(TABLES, logdata.end(batches)))
    return {
        "warehouse": warehouse, "options": sorted(store.options), "offsets": offsets,
        "checkpoint": checkpoint,
        "compaction": (f"{compaction.files_removed} → {compaction.files_added} files"
                       if compaction is not None else "none"),
        "rows match": ok, "seconds": round(time.monotonic() - started, 2),
        "calls": len(batches),
    }


def main() -> int:
    versitygw, azurite = ensure_tools()
    from kraft_spark.spark_session import build_spark

    s3_port, az_port = free_port(), free_port()
    work = Path(tempfile.mkdtemp(prefix="kraft-object-stores-"))
    (work / "s3" / BUCKET).mkdir(parents=True)  # versitygw's posix backend: a bucket per dir
    # delta-rs's Azure client talks to the emulator at this address (AZURE_STORAGE_USE_EMULATOR).
    os.environ["AZURE_STORAGE_USE_EMULATOR"] = "true"
    os.environ["AZURITE_BLOB_STORAGE_URL"] = f"http://127.0.0.1:{az_port}"
    run = time.strftime("%Y%m%d-%H%M%S")
    results = []
    with serving([str(versitygw), "--port", f"127.0.0.1:{s3_port}", "--access", "kraft",
                  "--secret", "kraft-secret", "--quiet", "posix", str(work / "s3")],
                 s3_port, "versitygw"), \
         serving([str(azurite), "--blobHost", "127.0.0.1", "--blobPort", str(az_port),
                  "--location", str(work / "azure"), "--skipApiVersionCheck", "--loose",
                  "--silent", "--disableTelemetry"], az_port, "Azurite"):
        make_container(az_port)
        say(f"versitygw on 127.0.0.1:{s3_port}, Azurite on 127.0.0.1:{az_port}; starting Spark")
        spark = build_spark("object-store-check", master="local[2]",
                            warehouse_dir=str(work / "catalog"), extra_conf={
            "spark.hadoop.fs.s3a.endpoint": f"127.0.0.1:{s3_port}",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.access.key": "kraft",
            "spark.hadoop.fs.s3a.secret.key": "kraft-secret",
            "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
            f"spark.hadoop.fs.azure.account.key.{AZURE_ACCOUNT}.dfs.core.windows.net": AZURE_KEY,
        })
        try:
            for warehouse in (f"s3a://{BUCKET}/wh-{run}",
                              f"abfss://{BUCKET}@{AZURE_ACCOUNT}.dfs.core.windows.net/wh-{run}"):
                say(f"materializing into {warehouse}")
                results.append(check(spark, warehouse))
                say(f"  {results[-1]}")
        finally:
            spark.stop()
    lines = [f"# The materializer on object-store servers ({run})", "",
             "| warehouse | offsets | checkpoint | compaction | rows match | seconds |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        offsets = "/".join(str(v) for v in r["offsets"].values())
        lines.append(f"| `{r['warehouse']}` | {offsets} | v{r['checkpoint']} | "
                     f"{r['compaction']} | {r['rows match']} | {r['seconds']} "
                     f"({r['calls']} calls) |")
    report = ROOT / "bench" / "results" / f"object-stores-{run}.md"
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    say("\n".join(lines))
    say(f"report: {report}")
    return 0 if all(r["rows match"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
