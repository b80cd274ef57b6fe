"""spark-submit as written (issue 43): the properties file's Delta pin, what build_spark takes
from a submission, the master it picks, the command a bad submission is told, and the command
line of ``kraft-spark run`` for a cluster with the packed environment. No Spark is started."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

from kraft_spark.commands.pack_env import split_requirements
from kraft_spark.commands.run import submit_command
from kraft_spark.errors import CommandError
from kraft_spark.spark_session import (
    CONF_DIR_ENV,
    DELTA_VERSION_ENV,
    IVY_DIR_ENV,
    delta_maven_coordinate,
    read_properties,
    spark_conf,
)
from kraft_spark.spark_submit import choose_master, missing_delta_message, working_command

REPO = Path(__file__).resolve().parents[1]
DEFAULTS = REPO / "conf" / "spark-defaults.conf"


@pytest.fixture(autouse=True)
def _repository_conf(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (CONF_DIR_ENV, DELTA_VERSION_ENV, IVY_DIR_ENV, "PYSPARK_PYTHON"):
        monkeypatch.delenv(name, raising=False)


def test_the_properties_file_pins_the_installed_delta_spark() -> None:
    """spark-submit reads the coordinate from the file, build_spark computes it from the pip
    package: they must be the same release, and within pyproject.toml's pin."""
    packages = read_properties(DEFAULTS)["spark.jars.packages"].split(",")
    delta = [p for p in packages if p.startswith("io.delta:delta-spark")]
    assert delta == [delta_maven_coordinate()], (
        f"conf/spark-defaults.conf names {delta}, the installed delta-spark needs "
        f"{delta_maven_coordinate()}: update spark.jars.packages there")
    with open(REPO / "pyproject.toml", "rb") as fh:
        pins = [d for d in tomllib.load(fh)["project"]["dependencies"]
                if d.startswith("delta-spark")]
    low = re.search(r">=\s*(\d+\.\d+)", pins[0])
    assert low is not None
    assert delta[0].rsplit(":", 1)[1].startswith(low.group(1) + ".")


def test_the_file_holds_what_spark_submit_needs() -> None:
    props = read_properties(DEFAULTS)
    assert props["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert props["spark.sql.catalog.spark_catalog"].endswith("DeltaCatalog")
    # Relative to the repository's root, where the documented line runs.
    assert "-Dlog4j2.configurationFile=conf/log4j2.properties" in (
        props["spark.driver.extraJavaOptions"])
    assert (REPO / "conf" / "log4j2.properties").is_file()
    assert "spark.master" not in props  # spark-submit's --master must stay free


def test_build_spark_computes_the_jars_and_log4j_path_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DELTA_VERSION_ENV, "4.4.9")  # still applies although the file pins
    monkeypatch.setenv("KRAFT_SPARK_CDS", "off")  # its driver option: tests/spark
    conf = spark_conf("app", "local[3]", "/tmp/wh")
    assert conf["spark.jars.packages"] == "io.delta:delta-spark_2.13:4.4.9"
    log4j = f"-Dlog4j2.configurationFile={(REPO / 'conf' / 'log4j2.properties').as_uri()}"
    assert conf["spark.driver.extraJavaOptions"] == log4j  # absolute: any working directory
    assert conf["spark.pyspark.python"] == sys.executable


def test_a_submissions_settings_rank_above_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    submitted = {"spark.sql.shuffle.partitions": "9", "spark.executor.memory": "3g",
                 "spark.pyspark.python": "./environment/bin/python", "spark.master": "yarn"}
    conf = spark_conf("app", "yarn", "/tmp/wh", {"spark.executor.memory": "1g"}, submitted)
    assert conf["spark.sql.shuffle.partitions"] == "9"  # the file says 4
    assert conf["spark.executor.memory"] == "1g"  # extra_conf still wins
    assert conf["spark.pyspark.python"] == "./environment/bin/python"
    # PYSPARK_PYTHON given to spark-submit (Spark's documented way) counts too.
    monkeypatch.setenv("PYSPARK_PYTHON", "./environment/bin/python")
    conf = spark_conf("app", "yarn", "/tmp/wh", None, {"spark.master": "yarn"})
    assert conf["spark.pyspark.python"] == "./environment/bin/python"


@pytest.mark.parametrize(("configured", "submitted", "expected"), [
    ("", None, "local[7]"),  # kraft-spark run
    ("", "local[*]", "local[7]"),  # spark-submit without --master
    ("", "local[2]", "local[7]"),  # too few slots for 3 voters and the Delta jobs
    ("", "local[8]", "local[8]"),
    ("", "spark://h:7077", "spark://h:7077"),
    ("", "yarn", "yarn"),
    ("local-cluster[4,1,1024]", "yarn", "local-cluster[4,1,1024]"),  # the app's --master
])
def test_the_master(configured: str, submitted: str | None, expected: str) -> None:
    conf = {} if submitted is None else {"spark.master": submitted}
    assert choose_master(configured, conf, voters=3) == expected


def test_a_submission_without_delta_is_told_the_command_that_works(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    argv = [str(REPO / "driver" / "app.py"), "--data-dir", "/tmp/d d"]
    command = working_command(DEFAULTS, argv, {"spark.master": "local[*]"})
    assert command == ("spark-submit --properties-file conf/spark-defaults.conf "
                       "driver/app.py --data-dir '/tmp/d d'")
    on_yarn = working_command(DEFAULTS, argv, {"spark.master": "yarn",
                                               "spark.submit.deployMode": "cluster"})
    assert "--master yarn --deploy-mode cluster driver/app.py" in on_yarn
    message = missing_delta_message(DEFAULTS, "io.delta:delta-spark_2.13:4.4.0", argv, {})
    assert "io.delta:delta-spark_2.13:4.4.0" in message
    assert message.endswith(command)


def test_run_submits_to_a_cluster_with_the_environment_archive(tmp_path: Path) -> None:
    archive = tmp_path / "env.tar.gz"
    archive.write_bytes(b"")
    cmd = submit_command("spark://h:7077", ["--packages", "org.apache.hadoop:hadoop-aws:3.4.2"],
                         ["--data-dir", "d", "--master", "spark://h:7077"], str(archive))
    assert cmd[0] == str(Path(sys.executable).parent / "spark-submit")
    joined = " ".join(cmd)
    assert f"--properties-file {DEFAULTS}" in joined
    # One --packages: a second would replace the first.
    assert cmd.count("--packages") == 1
    assert (f"--packages {delta_maven_coordinate()},org.apache.hadoop:hadoop-aws:3.4.2"
            in joined)
    assert f"--archives {archive}#environment" in joined
    assert "--conf spark.pyspark.python=./environment/bin/python" in joined
    assert f"--conf spark.pyspark.driver.python={sys.executable}" in joined
    assert "--master spark://h:7077" in joined
    assert cmd[-5].endswith("driver/app.py")
    assert cmd[-4:] == ["--data-dir", "d", "--master", "spark://h:7077"]
    # In cluster deploy mode the driver runs from the archive as well.
    cluster = submit_command("yarn", ["--deploy-mode", "cluster"], [], str(archive))
    assert not any(c.startswith("spark.pyspark.driver.python") for c in cluster)


def test_run_refuses_the_archive_for_a_local_master(tmp_path: Path) -> None:
    archive = tmp_path / "env.tar.gz"
    archive.write_bytes(b"")
    for master in (None, "local[7]"):
        with pytest.raises(CommandError, match="is for a cluster"):
            submit_command(master, [], [], str(archive))
    with pytest.raises(CommandError, match="no such file"):
        submit_command("yarn", [], [], str(tmp_path / "missing.tar.gz"))
    # A master among the spark-submit arguments counts.
    assert "--archives" in submit_command(None, ["--master", "yarn"], [], str(archive))


def test_the_archive_leaves_out_what_spark_provides() -> None:
    with_deps, without = split_requirements(REPO)
    names = " ".join(with_deps + without)
    assert "pyspark" not in names
    assert [r for r in without if r.startswith("delta-spark")]  # its dependency is pyspark
    assert any(r.startswith("deltalake") for r in with_deps)


def test_a_client_mode_driver_maps_the_class_data_archive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver spark-submit starts on this machine takes the archive `make` built
    (kraft_spark/spark_cds.py) beside log4j's option; a cluster-mode driver, started on another
    host, does not."""
    from kraft_spark import spark_cds

    archive = tmp_path / "driver.jsa"
    archive.write_bytes(b"")
    monkeypatch.setattr(spark_cds, "archive_path", lambda: archive)
    monkeypatch.delenv(spark_cds.DISABLE_ENV, raising=False)

    def driver_options(spark_args: list[str]) -> list[str]:
        cmd = submit_command("spark://h:7077", spark_args, [])
        return [cmd[i + 1] for i, arg in enumerate(cmd[:-1]) if arg == "--conf"
                and cmd[i + 1].startswith("spark.driver.extraJavaOptions=")]

    [client] = driver_options([])
    assert f"-XX:SharedArchiveFile={archive}" in client
    assert "-Dlog4j2.configurationFile=" in client  # one option string holds both
    [cluster] = driver_options(["--deploy-mode", "cluster"])
    assert "SharedArchiveFile" not in cluster
    monkeypatch.setenv(spark_cds.DISABLE_ENV, "off")
    [off] = driver_options([])
    assert "SharedArchiveFile" not in off
