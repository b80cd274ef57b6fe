"""``kraft-spark run``: the main job, the Spark application with its embedded defaults.

Local mode with 3 voters, Delta tables under ``--data-dir`` (default ``./data``), HTTP on
127.0.0.1:8080. It runs ``driver/app.py`` in this process (pyspark starts the JVM), or, with
extra arguments after ``--`` or ``--env-archive``, through ``spark-submit`` so any Spark option
can be passed (``submit_command``: the properties file of ``conf/``, as a user's spark-submit).

``--env-archive`` ships this project's environment to the executors (``kraft-spark pack-env``:
Spark's "Python Package Management" with venv-pack): ``--archives ARCHIVE#environment`` and
``spark.pyspark.python=./environment/bin/python``; the driver (client mode) runs this
interpreter. A cluster's hosts need not have the project installed then.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from kraft_spark.errors import CommandError

# Where spark-submit unpacks --env-archive in each container's working directory.
ENV_LINK = "environment"


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
    parser.add_argument("--env-archive", default=None, metavar="ARCHIVE",
                        help="the environment for a cluster's executors (`kraft-spark pack-env`): "
                        "submitted with --archives ARCHIVE#environment; needs a --master that "
                        "is not local")
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
    if not args.spark_args and args.env_archive is None:
        from driver.app import main

        return main(app_args)
    cmd = submit_command(args.master, args.spark_args, app_args, args.env_archive)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.Popen(cmd, env=env)
    # SIGTERM (a service manager's stop, a test's) goes to the Python driver spark-submit
    # started, which stops gracefully (the leader resigns, the last commits are materialized)
    # and exits, and spark-submit with it; signalled itself, spark-submit's JVM would go first
    # and leave that driver orphaned.
    signal.signal(signal.SIGTERM, lambda signum, _: _signal_driver(proc, signum))
    return proc.wait()


def submit_command(master: str | None, spark_args: Sequence[str], app_args: Sequence[str],
                   env_archive: str | None = None) -> list[str]:
    """The spark-submit command line of ``kraft-spark run MASTER ... -- SPARK_ARGS``.

    The properties file of conf/ (as the documented spark-submit line), with the Delta
    coordinate of the installed pip package on top (``--packages``, merged into the user's own)
    and log4j2 named by absolute path (the file's is relative to the repository's root, and
    this command runs from anywhere); a client-mode driver maps the class-data archive."""
    import driver.app
    from kraft_spark import spark_cds
    from kraft_spark.spark_session import conf_dir, defaults_file, delta_maven_coordinate
    from kraft_spark.spark_submit import local_slots

    user = list(spark_args)
    packages = [delta_maven_coordinate()]
    if "--packages" in user[:-1]:  # merged: a second --packages would replace the first
        at = user.index("--packages")
        packages.append(user[at + 1])
        del user[at:at + 2]
    cmd = [os.path.join(os.path.dirname(sys.executable), "spark-submit"),
           "--properties-file", str(defaults_file()), "--packages", ",".join(packages)]
    driver_options = []
    log4j = conf_dir() / "log4j2.properties"
    if log4j.is_file():
        driver_options.append(f"-Dlog4j2.configurationFile={log4j.as_uri()}")
    # In client mode the driver's JVM starts on this machine, from this environment's jars:
    # the class-data archive `make` built for them (kraft_spark.spark_cds) shortens its start
    # as it does `kraft-spark run`'s in-process one. A cluster-mode driver starts elsewhere.
    archive = spark_cds.driver_java_option()
    if archive and not _cluster_deploy_mode(user):
        driver_options.append(archive)
    if driver_options:
        cmd += ["--conf", "spark.driver.extraJavaOptions=" + " ".join(driver_options)]
    if master is not None:
        cmd += ["--master", master]  # spark-submit ships --archives by the master's rules
    if "--master" in user[:-1]:
        master = user[user.index("--master") + 1]
    if env_archive is not None:
        if master is None or local_slots(master) is not None:  # local-cluster[...] ships it
            raise CommandError("--env-archive is for a cluster (--master spark://..., yarn, "
                               "k8s://...); a local master runs this environment", 2)
        if not os.path.isfile(env_archive):
            raise CommandError(f"--env-archive {env_archive}: no such file (build it with "
                               "`kraft-spark pack-env`)", 2)
        cmd += ["--archives", f"{os.path.abspath(env_archive)}#{ENV_LINK}",
                "--conf", f"spark.pyspark.python=./{ENV_LINK}/bin/python"]
        if not _cluster_deploy_mode(user):  # the driver runs here, on this interpreter
            cmd += ["--conf", f"spark.pyspark.driver.python={sys.executable}"]
    return [*cmd, *user, driver.app.__file__, *app_args]


def _cluster_deploy_mode(spark_args: Sequence[str]) -> bool:
    joined = " ".join(spark_args)
    return "--deploy-mode cluster" in joined or "spark.submit.deployMode=cluster" in joined


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
