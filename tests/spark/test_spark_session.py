"""build_spark: configuration from conf/, the Delta coordinate, a clear error without jars."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kraft_spark import spark_cds, spark_session
from kraft_spark.spark_session import (
    CONF_DIR_ENV,
    DELTA_VERSION_ENV,
    IVY_DIR_ENV,
    conf_dir,
    delta_maven_coordinate,
    read_properties,
    spark_conf,
)

REPO = Path(__file__).resolve().parents[2]


def test_conf_dir_is_the_repository_conf(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONF_DIR_ENV, raising=False)
    assert conf_dir() == REPO / "conf"
    assert (conf_dir() / "spark-defaults.conf").is_file()
    assert (conf_dir() / "log4j2.properties").is_file()


def test_delta_coordinate_matches_the_pip_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    monkeypatch.delenv(DELTA_VERSION_ENV, raising=False)
    pip_version = importlib.metadata.version("delta-spark")
    coordinate = delta_maven_coordinate()
    group, artifact, version = coordinate.split(":")
    assert (group, artifact) == ("io.delta", "delta-spark_2.13")
    assert version.split(".")[:2] == pip_version.split(".")[:2]
    monkeypatch.setenv(DELTA_VERSION_ENV, "9.9.9")
    assert delta_maven_coordinate() == "io.delta:delta-spark_2.13:9.9.9"


def test_read_properties(tmp_path: Path) -> None:
    path = tmp_path / "spark-defaults.conf"
    path.write_text(
        "# comment\n\n! also a comment\nspark.a=1\nspark.b   two words \nspark.c : x=y\n"
        "spark.d=http://host:80/p\n"
    )
    assert read_properties(path) == {
        "spark.a": "1",
        "spark.b": "two words",
        "spark.c": "x=y",
        "spark.d": "http://host:80/p",
    }


def test_spark_conf_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "spark-defaults.conf").write_text(
        "spark.sql.shuffle.partitions=3\nspark.jars.packages=org.example:thing:1.0\n"
        "spark.driver.extraJavaOptions=-Dx=1\n"
    )
    (tmp_path / "log4j2.properties").write_text("rootLogger.level = warn\n")
    monkeypatch.setenv(CONF_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(IVY_DIR_ENV, str(tmp_path / "ivy"))
    monkeypatch.setenv(spark_cds.DISABLE_ENV, "off")  # its own test below
    conf = spark_conf("app", "local[3]", tmp_path / "wh", {"spark.sql.shuffle.partitions": "7"})
    assert conf["spark.app.name"] == "app"
    assert conf["spark.master"] == "local[3]"
    assert conf["spark.sql.warehouse.dir"] == str((tmp_path / "wh").resolve())
    assert conf["spark.sql.shuffle.partitions"] == "7"  # extra_conf beats the file
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.pyspark.python"] == sys.executable
    assert conf["spark.jars.ivy"] == str((tmp_path / "ivy").resolve())
    packages = conf["spark.jars.packages"].split(",")
    assert packages == [delta_maven_coordinate(), "org.example:thing:1.0"]
    log4j = f"-Dlog4j2.configurationFile={(tmp_path / 'log4j2.properties').as_uri()}"
    assert conf["spark.driver.extraJavaOptions"] == f"-Dx=1 {log4j}"
    assert conf["spark.executor.extraJavaOptions"] == log4j


def test_the_driver_maps_the_class_data_archive_when_there_is_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "driver.jsa"
    monkeypatch.setattr(spark_cds, "archive_path", lambda: archive)
    monkeypatch.delenv(spark_cds.DISABLE_ENV, raising=False)
    assert spark_cds.driver_java_option() is None  # none built: Spark starts as it always did
    assert "SharedArchiveFile" not in spark_conf("app").get("spark.driver.extraJavaOptions", "")
    archive.write_bytes(b"archive")
    conf = spark_conf("app", extra_conf={"spark.driver.extraJavaOptions": "-Dx=1"})
    options = conf["spark.driver.extraJavaOptions"].split()
    assert options[0] == "-Dx=1" and f"-XX:SharedArchiveFile={archive}" in options
    assert "SharedArchiveFile" not in conf.get("spark.executor.extraJavaOptions", "")
    # local-cluster's executors are JVMs of this machine with the driver's class path.
    cluster = spark_conf("app", "local-cluster[2,1,1024]")
    assert f"-XX:SharedArchiveFile={archive}" in cluster["spark.executor.extraJavaOptions"]
    # Under spark-submit the driver's JVM is already running; a user's own archive wins.
    assert "SharedArchiveFile" not in spark_conf(
        "app", submitted={"spark.master": "local[2]"}).get("spark.driver.extraJavaOptions", "")
    own = spark_conf("app", extra_conf={
        "spark.driver.extraJavaOptions": "-XX:SharedArchiveFile=/mine.jsa"})
    assert own["spark.driver.extraJavaOptions"].startswith("-XX:SharedArchiveFile=/mine.jsa")
    assert own["spark.driver.extraJavaOptions"].count("SharedArchiveFile") == 1
    monkeypatch.setenv(spark_cds.DISABLE_ENV, "off")
    assert spark_cds.driver_java_option() is None


@pytest.mark.spark
def test_the_suites_spark_driver_runs_on_the_class_data_archive(spark: Any) -> None:
    """`make` builds the archive (kraft_spark/spark_cds.py) and the JVM maps it: a JVM that
    refused it (another class path, another JDK) would start without it, silently slower."""
    archive = spark_cds.archive_path()
    assert archive.is_file(), (
        f"no class-data archive at {archive}: `make` builds it "
        "(python -m kraft_spark.spark_cds_build)")
    jvm = spark.sparkContext._jvm
    pid = jvm.java.lang.ProcessHandle.current().pid()
    assert str(archive) in Path(f"/proc/{pid}/maps").read_text(), (
        "the driver's JVM did not map the class-data archive: rebuild it with "
        "python -m kraft_spark.spark_cds_build")


@pytest.mark.spark
def test_session_has_delta_and_the_project_settings(spark: Any) -> None:
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.sparkContext.getConf().get("spark.dynamicAllocation.enabled") == "false"
    # Python workers run this interpreter.
    executables = spark.sparkContext.parallelize([0], 1).map(lambda _: sys.executable).collect()
    assert executables == [sys.executable]


@pytest.mark.spark
def test_unresolvable_delta_jars_raise_a_clear_error(tmp_path: Path) -> None:
    """A separate process (one SparkContext per process): a Delta version that does not exist."""
    script = textwrap.dedent(
        f"""
        from kraft_spark.spark_session import SparkSetupError, build_spark
        try:
            build_spark("bad", master="local[1]", warehouse_dir={str(tmp_path / "wh")!r})
        except SparkSetupError as exc:
            print("ERROR:", exc)
        """
    )
    env = dict(os.environ)
    env[DELTA_VERSION_ENV] = "0.0.404"
    env[IVY_DIR_ENV] = str(tmp_path / "ivy")
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert "ERROR: could not start Spark" in done.stdout, done.stdout + done.stderr
    assert "io.delta:delta-spark_2.13:0.0.404" in done.stdout
    assert str(tmp_path / "ivy") in done.stdout
    assert spark_session.MAVEN_CENTRAL in done.stdout
