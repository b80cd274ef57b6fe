"""Builds the Spark driver's class-data archive (``kraft_spark.spark_cds`` says what it is and
how the driver uses it): ``python -m kraft_spark.spark_cds_build``, which ``make`` runs once per
virtual environment."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kraft_spark import spark_cds


def _exercise(out: Path) -> None:
    """The probe, run in its own process: the classes a kraft-spark driver loads (a session with
    Delta, an append, a MERGE, reads and SQL), then a JVM exit that dumps them to ``out``."""
    from kraft_spark.spark_session import build_spark

    with tempfile.TemporaryDirectory(prefix="kraft-spark-cds-") as scratch:
        spark = build_spark("kraft-spark-cds", master="local[2]", warehouse_dir=scratch,
                            extra_conf={
                                "spark.ui.enabled": "false",
                                "spark.driver.extraJavaOptions":
                                    f"-XX:ArchiveClassesAtExit={out} -Xlog:cds=off "
                                    "-Xlog:cds+dynamic=off",
                            })
        table = f"{scratch}/t"
        spark.range(100).selectExpr("id", "cast(id as string) AS v") \
            .write.format("delta").save(table)
        spark.range(50, 150).selectExpr("id", "cast(id * 2 as string) AS v") \
            .createOrReplaceTempView("updates")
        spark.sql(f"MERGE INTO delta.`{table}` t USING updates u ON t.id = u.id "
                  "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        spark.sql(f"SELECT count(*), max(v) FROM delta.`{table}` VERSION AS OF 0").collect()
        spark.read.format("delta").load(table).where("id > 10").orderBy("id").collect()
        gateway: Any = spark.sparkContext._gateway
        spark.stop()
        process = getattr(gateway, "proc", None)
        gateway.shutdown()
        if process is not None:  # the JVM exits when its stdin closes; the dump comes first
            process.stdin.close()
            process.wait(timeout=120)


def build() -> int:
    """Make the archive (replacing an old one atomically); 0 on success. A failure is reported
    and leaves things as they were: Spark starts without the archive."""
    target = spark_cds.archive_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    started = time.monotonic()
    print(f"[kraft-spark] building the Spark driver's class-data archive {target} "
          "(one Spark start, about 35 s)", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    # The probe's JVM dumps a new archive; mapping the old one as well would stop it at start
    # (a rebuild after a reinstall failed so).
    env[spark_cds.DISABLE_ENV] = "off"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "kraft_spark.spark_cds_build", "--probe", str(partial)],
            env=env, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
            print(f"[kraft-spark] could not build the class-data archive (exit "
                  f"{done.returncode}): Spark starts without it, only slower.\n{tail}",
                  file=sys.stderr)
            return 1
        os.replace(partial, target)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"[kraft-spark] could not build the class-data archive ({exc}): Spark starts "
              "without it, only slower", file=sys.stderr)
        return 1
    finally:
        partial.unlink(missing_ok=True)
    size = target.stat().st_size / 2**20
    print(f"[kraft-spark] class-data archive ready: {size:.0f} MiB in "
          f"{time.monotonic() - started:.0f} s", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kraft_spark.spark_cds_build",
        description="Build the class-data-sharing archive that starts the Spark driver faster.")
    parser.add_argument("--probe", metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        _exercise(Path(args.probe))
        return 0
    return build()


if __name__ == "__main__":
    sys.exit(main())
