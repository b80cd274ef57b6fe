"""The application's Spark Connect server: ``kraft-spark sql`` (and any user's
``SparkSession.builder.remote("sc://127.0.0.1:15002")``) query the live session's Delta tables
without starting a JVM of their own (a local session costs ~17 s of JVM start per query here).

pyspark 4.2 ships the server (its ``spark-connect`` jar) as a plugin of a running
SparkContext: ``spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin`` starts it with
the context, and each client gets a session of its own on that context, with its Delta
extensions. It listens on ``kraft.sql.host:kraft.sql.port`` (127.0.0.1:15002 by default; taken:
any free port; 0: no server).

Authenticated: the server requires a bearer token (Spark's ``spark.connect.authenticate.token``,
its pre-shared-key interceptor), taken from ``SPARK_CONNECT_AUTHENTICATE_TOKEN`` when the
driver's environment sets it, else generated at each start. While the application runs,
``<data-dir>/sql.endpoint`` holds its ``sc://host:port`` URL and ``<data-dir>/sql.token`` (mode
0600) the token, which ``kraft-spark sql --data-dir`` reads (``kraft_spark.sql_endpoint``). A
token holder can do whatever Spark can in the application: the token never goes to a log (Spark
redacts configuration keys matching ``token``) nor onto a command line: pyspark passes every
setting as ``--conf key=value`` on the command line of the JVM it launches, which ``ps`` shows
to every user of the host, so the server takes the token from that JVM's environment instead
(``token_for_the_jvm``).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from typing import Any

from kraft_spark.delta.lease_views import register_lease_views
from kraft_spark.secret_files import new_token
from kraft_spark.spark_submit import under_spark_submit

PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
DEFAULT_PORT = 15002


def choose_port(host: str, port: int) -> int:
    """``port`` if it is free on ``host``, else a free one the system picks (0 stays 0)."""
    if port == 0:
        return 0
    for candidate in (port, 0):
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            try:
                probe.bind((host, candidate))
            except OSError:
                continue
            return int(probe.getsockname()[1])
    raise OSError(f"no free port for the Spark Connect server on {host}")


TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"


def server_token() -> str:
    """The token the server will require: the operator's (``$SPARK_CONNECT_AUTHENTICATE_TOKEN``)
    or a fresh one."""
    return os.environ.get(TOKEN_ENV, "").strip() or new_token()


def connect_conf(host: str, port: int) -> dict[str, str]:
    """The Spark settings that start the server with the context (none for port 0); the token
    goes by ``token_for_the_jvm``."""
    if port == 0:
        return {}
    return {
        "spark.plugins": PLUGIN,
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
    }


@contextlib.contextmanager
def token_for_the_jvm(token: str) -> Iterator[dict[str, str]]:
    """Deliver the server's token while the context starts; yields the settings to add.

    When this process launches the JVM (``make run``, ``kraft-spark run``), the token goes in
    the JVM's environment, where the server reads ``$SPARK_CONNECT_AUTHENTICATE_TOKEN``, and
    only the JVM's user can read it (``/proc/<pid>/environ``): a setting would be on the java
    command line. This process's environment is restored once the JVM runs. Under spark-submit
    the JVM runs already and settings reach it over py4j, not a command line: the token goes
    as ``spark.connect.authenticate.token``."""
    if under_spark_submit():
        yield {"spark.connect.authenticate.token": token}
        return
    before = os.environ.get(TOKEN_ENV)
    os.environ[TOKEN_ENV] = token
    try:
        yield {}
    finally:
        if before is None:
            del os.environ[TOKEN_ENV]
        else:
            os.environ[TOKEN_ENV] = before


def register_tables(spark: Any, warehouse: str) -> None:
    """Name the three Delta tables (and the lease views over them) in the context's catalog
    (shared by every session, Spark Connect clients' included), so ``spark.table("records")``
    works from any client."""
    for table in ("records", "snapshot", "quorum_events"):
        location = os.path.join(warehouse, table).replace("'", "\\'")
        spark.sql(f"CREATE TABLE IF NOT EXISTS {table} USING delta LOCATION '{location}'")
    register_lease_views(spark, temporary=False)  # leases, snapshot_leases
