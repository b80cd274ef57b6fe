"""The driver under ``spark-submit``: attached to a JVM that spark-submit started before Python.

``kraft-spark run`` lets pyspark start the JVM, so ``build_spark`` decides the jars, the master
and the JVM's options. Under ``spark-submit driver/app.py`` those were fixed before this process
started (pyspark finds ``PYSPARK_GATEWAY_PORT`` and attaches), so this module

- reads what the submission set (``--master``, ``--conf``, ``--properties-file``), which then
  ranks above ``conf/spark-defaults.conf`` in ``build_spark``;
- checks, within seconds of the JVM's start, that the Delta jars are on its class path, and
  otherwise names the spark-submit command that works (without this check the first Delta
  statement failed, and the application only gave up a minute later);
- picks the master: spark-submit's own unless it is its default ``local[*]`` or a local master
  with too few task slots for the voters' barrier stage;
- hands SIGINT/SIGTERM that reach the JVM (the process a user's Ctrl-C or a service manager
  signals) to this Python process, whose graceful stop then decides the exit code. Left to
  itself the JVM would run its shutdown hooks, stop the SparkContext under the voters and exit
  130/143 before the last commits were materialized. pyspark does the same for SIGINT when it
  starts the JVM itself (the JVM ignores it there).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("kraft_spark.spark_submit")

GATEWAY_ENV = "PYSPARK_GATEWAY_PORT"
DELTA_CLASS = "io.delta.tables.DeltaTable"
# spark-submit's master when none was given; also what an explicit --master local[*] reads as.
SUBMIT_DEFAULT_MASTER = "local[*]"

_LOCAL_SLOTS = re.compile(r"local\[(\d+|\*)(?:,\s*\d+)?\]")

# The handlers lent to the JVM, referenced for the process's life: the JVM may call one at
# any time, and py4j drops its own reference once Java's proxy object is collected.
_forwarders: list[Any] = []


def under_spark_submit() -> bool:
    """True when spark-submit started the JVM and this process attaches to it."""
    return GATEWAY_ENV in os.environ


def _jvm() -> Any:
    from pyspark import SparkContext

    SparkContext._ensure_initialized()  # attaches to spark-submit's gateway; no context yet
    return SparkContext._jvm


def submitted_conf() -> dict[str, str]:
    """The ``spark.*`` settings the JVM was submitted with ({} when not under spark-submit)."""
    if not under_spark_submit():
        return {}
    from pyspark import SparkConf

    _jvm()
    return {str(k): str(v) for k, v in SparkConf().getAll()}


def delta_on_classpath() -> bool:
    """Whether the running JVM can load Delta: spark-submit put ``spark.jars.packages`` on the
    class loader it runs the application with (the py4j threads inherit it)."""
    from py4j.protocol import Py4JError

    jvm = _jvm()
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        jvm.java.lang.Class.forName(DELTA_CLASS, False, loader)
    except Py4JError:
        return False
    return True


def _shown(path: str | Path) -> str:
    """A path as a user would type it here: relative to the working directory when inside it."""
    absolute = Path(path).resolve()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def working_command(properties_file: Path, argv: Sequence[str],
                    submitted: Mapping[str, str]) -> str:
    """The spark-submit line that runs this application as it was started, with Delta."""
    cmd = ["spark-submit", "--properties-file", _shown(properties_file)]
    master = submitted.get("spark.master", "")
    if master and master != SUBMIT_DEFAULT_MASTER:
        cmd += ["--master", master]
    if submitted.get("spark.submit.deployMode") == "cluster":
        cmd += ["--deploy-mode", "cluster"]
    script = argv[0] if argv else "driver/app.py"
    return shlex.join([*cmd, _shown(script), *argv[1:]])


def missing_delta_message(properties_file: Path, coordinate: str, argv: Sequence[str],
                          submitted: Mapping[str, str]) -> str:
    return (f"spark-submit started Spark without the Delta jars ({coordinate}). Submit with "
            "the project's properties file, which names them and Delta's settings:\n  "
            f"{working_command(properties_file, argv, submitted)}")


def local_slots(master: str) -> int | None:
    """Task slots of a local master (``local``: 1, ``local[*]``: the CPUs); None otherwise."""
    if master == "local":
        return 1
    match = _LOCAL_SLOTS.fullmatch(master)
    if match is None:
        return None
    return os.cpu_count() or 1 if match.group(1) == "*" else int(match.group(1))


def choose_master(configured: str, submitted: Mapping[str, str], voters: int) -> str:
    """The application's master: ``--master`` of the application, else spark-submit's, else
    ``local[max(voters, 5) + 2]`` (room to grow to 5 voters live, plus the Delta jobs).

    spark-submit's ``local[*]`` is its default when no ``--master`` was given, so it means
    "unspecified" here; a local master with fewer slots than voters + 1 cannot hold the barrier
    stage (one slot per voter, one for the Delta jobs) and is replaced the same way."""
    if configured:
        return configured
    default = f"local[{max(voters, 5) + 2}]"
    given = submitted.get("spark.master", "")
    if not given or given == SUBMIT_DEFAULT_MASTER:
        return default
    slots = local_slots(given)
    if slots is not None and slots < voters + 1:
        return default
    return given


class _ForwardSignal:
    """A ``sun.misc.SignalHandler`` in Python: the JVM's signal goes to this process."""

    def handle(self, sig: Any) -> None:
        os.kill(os.getpid(), int(sig.getNumber()))

    class Java:
        implements = ["sun.misc.SignalHandler"]  # noqa: RUF012 (py4j reads this class attribute)


def forward_jvm_signals(signals: Sequence[str] = ("INT", "TERM")) -> bool:
    """Under spark-submit, make the JVM hand ``signals`` to this process instead of shutting
    down (see the module docstring); call it once this process handles them. True if done."""
    if not under_spark_submit():
        return False
    from py4j.protocol import Py4JError
    from pyspark import SparkContext
    from pyspark.java_gateway import ensure_callback_server_started

    jvm = _jvm()
    handler = _ForwardSignal()
    _forwarders.append(handler)
    try:
        ensure_callback_server_started(SparkContext._gateway)  # type: ignore[no-untyped-call]
        for name in signals:
            jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), handler)
    except (Py4JError, OSError) as exc:  # the JVM's default stays: it stops, not gracefully
        log.warning("cannot take over the JVM's %s: %s", "/".join(signals), exc)
        return False
    return True

