"""``kraft-spark sql``: query the Delta tables of a data directory with Spark SQL.

The tables ``records``, ``snapshot`` and ``quorum_events`` are registered as views, plus
``snapshot_at`` when ``--as-of-offset N`` asks for the snapshot as of Raft offset N (Delta time
travel to the version that materialized N, completed from ``records``). It reads the tables
only.

Where it runs: when the application of ``--data-dir`` runs, through its Spark Connect server
(``<data-dir>/sql.endpoint``, driver/sql_server.py): a session on the live SparkContext, no JVM
to start (under a second for a small query instead of ~17 s). Otherwise, with ``--local``, or
for ``--as-of-offset`` (its offset-to-version lookup reads Delta's log through the JVM, which a
Connect client has not), in a SparkSession of its own in local mode.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from kraft_spark.errors import CommandError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("sql", help="query the Delta tables with Spark SQL")
    parser.add_argument("query", help='e.g. "SELECT * FROM snapshot ORDER BY key"')
    parser.add_argument("--data-dir", default="data", help="the application's data directory")
    parser.add_argument("--warehouse", default=None,
                        help="the warehouse (default: the one the application of --data-dir "
                        "ran with, kraft.warehouse.uri)")
    parser.add_argument("--as-of-offset", type=int, default=None,
                        help="also register snapshot_at: the snapshot as of this Raft offset")
    parser.add_argument("--limit", type=int, default=100, help="rows to print (default 100)")
    parser.add_argument("--local", action="store_true",
                        help="start a local Spark session even when the application runs")
    parser.set_defaults(func=_sql)


def _sql(args: argparse.Namespace) -> int:
    # Everything checkable is checked before the JVM starts (seconds).
    if args.limit < 1:
        raise CommandError(f"--limit must be at least 1, got {args.limit}")
    if args.as_of_offset is not None and args.as_of_offset < 0:
        raise CommandError(f"--as-of-offset must be 0 or more, got {args.as_of_offset}")
    from kraft_spark.warehouse.location import is_uri, normalize_warehouse, warehouse_of

    try:
        warehouse = normalize_warehouse(args.warehouse or warehouse_of(
            os.path.abspath(args.data_dir)))
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if not is_uri(warehouse) and not os.path.isdir(os.path.join(warehouse, "records")):
        raise CommandError(f"no Delta tables under {warehouse}: start the application with "
                           f"`kraft-spark run --data-dir {args.data_dir}` first")
    cluster_id = _cluster_id(args.data_dir) if args.as_of_offset is not None else None
    spark = None
    if cluster_id is None and not args.local:
        spark = _remote_session(os.path.abspath(args.data_dir))
    if spark is None:
        from kraft_spark.spark_session import build_spark

        spark = build_spark("kraft-spark-sql", master="local[2]",
                            extra_conf={"spark.ui.enabled": "false"})
    try:
        for table in ("records", "snapshot", "quorum_events"):
            path = os.path.join(warehouse, table)
            try:
                spark.read.format("delta").load(path).createOrReplaceTempView(table)
            except Exception as exc:  # AnalysisException: not (or no longer) a Delta table
                raise CommandError(
                    f"{path} is not a readable Delta table ({str(exc).splitlines()[0]})"
                ) from exc
        from kraft_spark.delta.lease_views import register_lease_views

        register_lease_views(spark, temporary=True)  # leases, snapshot_leases
        if cluster_id is not None:
            from kraft_spark.delta import MaterializerError, snapshot

            try:
                frame = snapshot(spark, warehouse, as_of_offset=args.as_of_offset,
                                 app_id=cluster_id)
            except (ValueError, MaterializerError) as exc:
                raise CommandError(str(exc)) from exc
            frame.createOrReplaceTempView("snapshot_at")
        try:
            result = spark.sql(args.query)
        except Exception as exc:  # AnalysisException, ParseException: the user's query
            raise CommandError(str(exc).splitlines()[0]) from exc
        result.show(args.limit, truncate=False)
    finally:
        spark.stop()
    return 0


def _remote_session(data_dir: str) -> Any | None:
    """A Spark Connect session on the running application's context, or None (no
    application runs, or its server does not answer: the caller starts a local session)."""
    from kraft_spark.secret_files import SecretFileError
    from kraft_spark.sql_endpoint import connect_url

    try:
        url = connect_url(data_dir)
    except SecretFileError as exc:
        raise CommandError(f"the application's Spark Connect token: {exc}") from None
    if url is None:
        return None
    shown = url.partition("/;")[0]  # never the token
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    try:
        spark = SparkSession.builder.remote(url).getOrCreate()
        spark.sql("SELECT 1").collect()  # the server answers (the file may be stale)
    except (PySparkException, OSError) as exc:
        print(f"(the application's Spark Connect server {shown} did not answer: "
              f"{str(exc).splitlines()[0]}; starting a local session)", file=sys.stderr)
        return None
    print(f"(through the running application at {shown})", file=sys.stderr)
    return spark


def _cluster_id(data_dir: str) -> str:
    """The application's cluster id (its Delta commits' app id), read, never created."""
    from kraft_spark.commands.local import read_cluster_id

    path = os.path.join(data_dir, "cluster.id")
    needed = "--as-of-offset needs the cluster id of the application that wrote the tables"
    try:
        cluster_id = read_cluster_id(data_dir)
    except (OSError, UnicodeError) as exc:
        raise CommandError(f"cannot read {path} ({exc}): {needed}") from exc
    if cluster_id is None:
        raise CommandError(f"{path} does not exist: {needed}")
    return cluster_id
