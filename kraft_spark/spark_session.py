"""The project's SparkSession: Delta Lake enabled, quiet, on a fresh machine.

``build_spark`` starts (or returns) the process's SparkSession with

- the Delta jars resolved by Spark itself from Maven Central through ``spark.jars.packages``
  (``io.delta:delta-spark_2.13:<version of the installed delta-spark pip package>``) into the Ivy
  cache (Spark's default ``~/.ivy2.5.2``, or ``KRAFT_SPARK_IVY_DIR``, or ``spark.jars.ivy`` in
  ``extra_conf``; ``~/.m2/repository`` is consulted first as well). The first start on a machine
  downloads 8 artifacts, 13 MB (27 MB of cache), which added about 2.5-4 s to start-up here
  (7-9 s to a session instead of 4.5-5 s warm, 2 cores); transitive jars pyspark already ships
  are excluded in spark-defaults.conf (without that: 33 artifacts, 87 MB, 174 MB of cache);
- ``conf/spark-defaults.conf`` and ``conf/log4j2.properties`` of the repository (or of the
  directory named by ``KRAFT_SPARK_CONF_DIR``): Delta's SQL extension and catalog, dynamic
  allocation off, few shuffle partitions, UTC session time zone, WARN logging;
- ``PYSPARK_PYTHON`` / ``spark.pyspark.python`` set to this interpreter, so Python workers and
  executors run the project's environment (the voters run in them).

Precedence, lowest first: the built-in Delta settings below, ``spark-defaults.conf``, what
spark-submit was given (under ``spark-submit driver/app.py``: ``kraft_spark.spark_submit``), the
arguments of ``build_spark``, ``extra_conf``.

``conf/spark-defaults.conf`` is also the properties file of ``spark-submit --properties-file
conf/spark-defaults.conf driver/app.py``, so it names the Delta jars itself
(``spark.jars.packages``, kept equal to the installed delta-spark's by
tests/test_spark_submit.py) and the driver's log4j2 file relative to the repository's root.
``build_spark`` computes both itself instead (the jars from the installed pip package or
``KRAFT_SPARK_DELTA_VERSION``; log4j2 by absolute path, so any working directory works).
Under spark-submit the JVM is already running: without the Delta jars ``build_spark`` fails at
once with the command that works, before any SparkContext is made.

A SparkContext is a process-wide singleton: when one is already running, ``build_spark`` returns
a session on it and settings that only apply at JVM start (jars, master, driver options) are
ignored; it still checks that Delta is loaded and raises ``SparkSetupError`` if not.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kraft_spark import spark_cds

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONF_DIR_ENV = "KRAFT_SPARK_CONF_DIR"
IVY_DIR_ENV = "KRAFT_SPARK_IVY_DIR"
DELTA_VERSION_ENV = "KRAFT_SPARK_DELTA_VERSION"
WAREHOUSE_ENV = "KRAFT_SPARK_WAREHOUSE"

DELTA_GROUP = "io.delta"
DELTA_ARTIFACT = "delta-spark_2.13"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
SPARK_PACKAGES = "https://repos.spark-packages.org/"  # Spark's last default resolver

# The Delta jar release for a delta-spark pip release, when the two differ. delta-spark 4.4.1 is
# a Python-only release: Maven Central has io.delta:delta-spark_2.13:4.4.0 but no 4.4.1 (checked
# against repo1.maven.org). Same major.minor is required; override with KRAFT_SPARK_DELTA_VERSION.
_DELTA_JAR_FOR_PIP = {"4.4.1": "4.4.0"}

# Settings Delta cannot work without; spark-defaults.conf normally repeats them.
_DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

_PROPERTY_LINE = re.compile(r"([^=:\s]+)\s*[=:\s]\s*(.*)")
_LOG4J_OPTION = re.compile(r"\s*-Dlog4j2\.configurationFile=\S+")
_JAVA_OPTIONS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


class SparkSetupError(RuntimeError):
    """The Spark application could not be started (Java gateway, Delta jars, configuration)."""


def conf_dir() -> Path:
    """The directory of spark-defaults.conf and log4j2.properties.

    ``KRAFT_SPARK_CONF_DIR`` if set, else the repository's ``conf/`` next to the package.
    """
    override = os.environ.get(CONF_DIR_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return Path(__file__).resolve().parent.parent / "conf"


def delta_jar_version() -> str:
    """The version of the Delta jars matching the installed delta-spark pip package."""
    override = os.environ.get(DELTA_VERSION_ENV)
    if override:
        return override
    try:
        pip_version = importlib.metadata.version("delta-spark")
    except importlib.metadata.PackageNotFoundError as exc:
        raise SparkSetupError(
            "the delta-spark pip package is not installed; install the project (`make test`) "
            f"or set {DELTA_VERSION_ENV}"
        ) from exc
    jar_version = _DELTA_JAR_FOR_PIP.get(pip_version, pip_version)
    if jar_version.split(".")[:2] != pip_version.split(".")[:2]:
        raise SparkSetupError(
            f"Delta jar version {jar_version} does not match delta-spark {pip_version} (pip)"
        )
    return jar_version


def delta_maven_coordinate() -> str:
    return f"{DELTA_GROUP}:{DELTA_ARTIFACT}:{delta_jar_version()}"


def read_properties(path: Path) -> dict[str, str]:
    """Read a spark-defaults.conf style file (``key value`` or ``key=value``, ``#`` comments)."""
    props: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = _PROPERTY_LINE.fullmatch(line)
        if match is None:
            props[line] = ""
        else:
            props[match.group(1)] = match.group(2).strip()
    return props


def default_ivy_dir(conf: Mapping[str, str] | None = None) -> Path:
    """Where Spark's Ivy resolution caches the jars for a given configuration."""
    if conf is not None and conf.get("spark.jars.ivy"):
        return Path(conf["spark.jars.ivy"]).expanduser()
    override = os.environ.get(IVY_DIR_ENV)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".ivy2.5.2"  # Spark 4's default (spark.jars.ivy unset)


def _delta_jar_cached(ivy_dir: Path, version: str) -> Path | None:
    jar = f"{DELTA_ARTIFACT}-{version}.jar"
    candidates = [
        ivy_dir / "jars" / f"{DELTA_GROUP}_{jar}",
        ivy_dir / "cache" / DELTA_GROUP / DELTA_ARTIFACT / "jars" / jar,
        Path.home() / ".m2" / "repository" / "io" / "delta" / DELTA_ARTIFACT / version / jar,
    ]
    return next((c for c in candidates if c.is_file()), None)


def _add_java_option(conf: dict[str, str], key: str, option: str) -> None:
    existing = conf.get(key, "")
    if option.split("=", 1)[0] not in existing:
        conf[key] = f"{existing} {option}".strip()


def defaults_file() -> Path:
    """``spark-defaults.conf`` of the conf directory: also spark-submit's ``--properties-file``."""
    return conf_dir() / "spark-defaults.conf"


def _file_defaults(path: Path) -> dict[str, str]:
    """The file's settings as build_spark uses them: without its Delta coordinate (computed from
    the installed pip package instead, so KRAFT_SPARK_DELTA_VERSION still applies) and without
    its log4j2 option (a path relative to the repository's root, for spark-submit run there;
    build_spark names the file by absolute path below)."""
    props = read_properties(path)
    packages = [p.strip() for p in props.get("spark.jars.packages", "").split(",")
                if p.strip() and not p.strip().startswith(f"{DELTA_GROUP}:delta-spark")]
    if packages:
        props["spark.jars.packages"] = ",".join(packages)
    else:
        props.pop("spark.jars.packages", None)
    for key in _JAVA_OPTIONS:
        if key in props:
            props[key] = _LOG4J_OPTION.sub("", props[key]).strip()
            if not props[key]:
                del props[key]
    return props


LOCAL_MASTER = re.compile(r"local(\[[0-9*]+(,\s*[0-9]+)?\])?")


def spark_conf(
    app_name: str,
    master: str = "local[5]",
    warehouse_dir: str | os.PathLike[str] | None = None,
    extra_conf: Mapping[str, str] | None = None,
    submitted: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The full configuration build_spark starts Spark with (exposed for tests and tools).

    ``submitted``: what spark-submit was given, when it started the JVM (``spark_submit``).
    Its Python for the executors (``spark.pyspark.python``, or the ``PYSPARK_PYTHON`` it was
    run with, e.g. ``./environment/bin/python`` of an ``--archives`` environment) then wins
    over this interpreter."""
    directory = conf_dir()
    conf: dict[str, str] = dict(_DELTA_CONF)
    if defaults_file().is_file():
        conf.update(_file_defaults(defaults_file()))
    conf["spark.pyspark.python"] = sys.executable
    if submitted:
        conf.update(submitted)
        python = submitted.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
        conf["spark.pyspark.python"] = python or sys.executable
    if warehouse_dir is None:
        warehouse_dir = os.environ.get(WAREHOUSE_ENV, "data/warehouse")
    conf.update(
        {
            "spark.app.name": app_name,
            "spark.master": master,
            "spark.sql.warehouse.dir": str(Path(warehouse_dir).expanduser().resolve()),
        }
    )
    ivy_override = os.environ.get(IVY_DIR_ENV)
    if ivy_override:
        conf["spark.jars.ivy"] = str(Path(ivy_override).expanduser().resolve())
    if extra_conf:
        conf.update(extra_conf)
    # Delta first; other packages from the file or extra_conf are kept; an explicit
    # io.delta:delta-spark coordinate there wins over the computed one.
    packages = [p.strip() for p in conf.get("spark.jars.packages", "").split(",") if p.strip()]
    if not any(p.startswith(f"{DELTA_GROUP}:delta-spark") for p in packages):
        packages.insert(0, delta_maven_coordinate())
    conf["spark.jars.packages"] = ",".join(packages)
    # Spark's own RPC listener (the driver's port) authenticated: in local mode Spark generates
    # the secret itself. Other masters need theirs (YARN and Kubernetes generate it; standalone
    # needs spark.authenticate.secret on every host): docs/operations/security.md.
    if LOCAL_MASTER.fullmatch(str(conf["spark.master"])):
        conf.setdefault("spark.authenticate", "true")
    log4j = directory / "log4j2.properties"
    if log4j.is_file():
        option = f"-Dlog4j2.configurationFile={log4j.as_uri()}"
        _add_java_option(conf, "spark.driver.extraJavaOptions", option)
        _add_java_option(conf, "spark.executor.extraJavaOptions", option)
    # The driver's classes from the archive `make` builds (kraft_spark.spark_cds): a start a
    # third shorter. A JVM that spark-submit already started cannot take it. local-cluster's
    # executors are JVMs of this machine on the same class path: theirs too.
    archive = spark_cds.driver_java_option()
    if archive and not submitted:
        _add_java_option(conf, "spark.driver.extraJavaOptions", archive)
    if archive and str(conf["spark.master"]).startswith("local-cluster"):
        _add_java_option(conf, "spark.executor.extraJavaOptions", archive)
    return conf


def build_spark(
    app_name: str,
    master: str = "local[5]",
    warehouse_dir: str | os.PathLike[str] | None = None,
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Start (or return) the SparkSession with Delta enabled; see the module docstring.

    ``master`` defaults to ``local[5]``: three voters plus slots for the driver's Delta writes
    (at least V + 1 slots: one per voter, one spare). ``warehouse_dir`` defaults to
    ``KRAFT_SPARK_WAREHOUSE`` or ``./data/warehouse``.
    """
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    from kraft_spark import spark_submit

    submitted = spark_submit.submitted_conf()
    if spark_submit.under_spark_submit() and not spark_submit.delta_on_classpath():
        raise SparkSetupError(spark_submit.missing_delta_message(
            defaults_file(), delta_maven_coordinate(), sys.argv, submitted))
    conf = spark_conf(app_name, master, warehouse_dir, extra_conf, submitted)
    os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]

    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except (PySparkException, OSError, RuntimeError) as exc:
        raise _startup_error(conf, exc) from exc
    _check_delta_loaded(spark, conf)
    return spark


def _startup_error(conf: Mapping[str, str], exc: BaseException) -> SparkSetupError:
    version = delta_jar_version()
    coordinate = delta_maven_coordinate()
    ivy_dir = default_ivy_dir(conf)
    if _delta_jar_cached(ivy_dir, version) is None:
        repos = [r for r in conf.get("spark.jars.repositories", "").split(",") if r]
        tried = [
            f"Ivy cache {ivy_dir} (spark.jars.ivy / {IVY_DIR_ENV})",
            f"local Maven repository {Path.home() / '.m2' / 'repository'}",
            f"Maven Central {MAVEN_CENTRAL}",
            f"spark-packages {SPARK_PACKAGES}",
            *repos,
        ]
        return SparkSetupError(
            f"could not start Spark: the Delta jars {coordinate} could not be resolved "
            f"(tried: {'; '.join(tried)}). Check access to Maven Central, or pre-fill the Ivy "
            f"cache, or set {DELTA_VERSION_ENV}. The JVM's own message is on stderr above. "
            f"Cause: {exc}"
        )
    return SparkSetupError(
        f"could not start Spark (Delta jars {coordinate} are cached in {ivy_dir}; see the JVM "
        f"output on stderr above): {exc}"
    )


def _check_delta_loaded(spark: SparkSession, conf: Mapping[str, str]) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        # Packages are on Spark's class loader (the thread's context loader), not py4j's own.
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName("io.delta.tables.DeltaTable", False, loader)
    except Exception as exc:
        raise SparkSetupError(
            "Spark is running without the Delta jars: a SparkContext was probably started "
            f"before build_spark without spark.jars.packages={conf['spark.jars.packages']}"
        ) from exc
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    if "DeltaSparkSessionExtension" not in extensions:
        raise SparkSetupError(
            "Spark is running without io.delta.sql.DeltaSparkSessionExtension in "
            "spark.sql.extensions (a SparkSession was started before build_spark)"
        )
