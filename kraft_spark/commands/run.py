"""``kraft-spark run``: the main job, the Spark application with its embedded defaults.

Local mode with 3 voters, Delta tables under ``--data-dir`` (default ``./data``), HTTP on
127.0.0.1:8080. It runs ``driver/app.py`` in this process (pyspark starts the JVM), or, with
extra arguments after ``--``, through ``spark-submit`` so any Spark option can be passed.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run", help="run the Spark application (local mode, 3 voters, Delta tables, HTTP)"
    )
    parser.add_argument("--data-dir", default=None, help="data directory (default ./data)")
    parser.add_argument("--http-port", type=int, default=None, help="HTTP port (default 8080)")
    parser.add_argument("--sql-port", type=int, default=None,
                        help="Spark Connect port for `kraft-spark sql` (default 15002, 0: none)")
    parser.add_argument("--voters", type=int, default=None, help="number of voters (default 3)")
    parser.add_argument("--master", default=None, help="Spark master (default local[V+2])")
    parser.add_argument("--config", default=None, help="properties file")
    parser.add_argument("--warehouse", default=None,
                        help="kraft.warehouse.uri: the Delta warehouse, a path or a Hadoop URI "
                        "(default <data-dir>/warehouse)")
    parser.add_argument("--voter-log-dir", default=None,
                        help="kraft.voter.log.dir: each voter's log on its executor's host "
                        "(default <data-dir>/voters)")
    parser.add_argument("--voter-http-base-port", type=int, default=None,
                        help="kraft.voter.http.base.port: voter i serves the HTTP API itself "
                        "on this + i; GET /v1/quorum names the leader's (default 8081, 0: any "
                        "free port, -1: none)")
    parser.add_argument("spark_args", nargs="*", metavar="-- SPARK-SUBMIT-ARGS",
                        help="extra spark-submit arguments, after --")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    app_args: list[str] = []
    for flag, value in (("--data-dir", args.data_dir), ("--http-port", args.http_port),
                        ("--sql-port", args.sql_port), ("--voters", args.voters),
                        ("--master", args.master), ("--config", args.config),
                        ("--warehouse", args.warehouse), ("--voter-log-dir", args.voter_log_dir),
                        ("--voter-http-base-port", args.voter_http_base_port)):
        if value is not None:
            app_args += [flag, str(value)]
    if not args.spark_args:
        from driver.app import main

        return main(app_args)
    import driver.app

    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    from kraft_spark.spark_session import delta_maven_coordinate

    cmd = [submit, "--packages", delta_maven_coordinate(), *args.spark_args,
           driver.app.__file__, *app_args]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.Popen(cmd, env=env)
    # SIGTERM (a service manager's stop, a test's) goes to the Python driver spark-submit
    # started, which stops gracefully (the leader resigns, the last commits are materialized)
    # and exits, and spark-submit with it; signalled itself, spark-submit's JVM would go first
    # and leave that driver orphaned.
    signal.signal(signal.SIGTERM, lambda signum, _: _signal_driver(proc, signum))
    return proc.wait()


def _signal_driver(proc: subprocess.Popen[bytes], signum: int) -> None:
    from kraft_spark.proc_tree import descendants

    for pid in descendants(proc.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"driver/app.py" in fh.read():
                    os.kill(pid, signum)
                    return
        except OSError:
            continue
    proc.send_signal(signum)  # not started yet (or no /proc): spark-submit itself
