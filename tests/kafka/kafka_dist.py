"""Apache Kafka's own tools, from Maven Central, for tests that check our formats against them.

``kafka_classpath()`` resolves ``org.apache.kafka:kafka-tools`` and its runtime dependencies
once with Maven (``mvn dependency:copy-dependencies`` on a generated POM; Maven's own cache,
``~/.m2``, is reused) into ``~/.cache/kraft-spark/kafka-<version>/``, marking the copy complete
with a ``.complete`` file written last. ``run_kafka_tool`` runs one main class on it.
Tests skip (with the reason) when Java or Maven is missing or Maven Central cannot be reached.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

KAFKA_VERSION = os.environ.get("KRAFT_SPARK_KAFKA_VERSION", "4.4.0")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kraft-spark"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kraft-spark</groupId><artifactId>kafka-tools-classpath</artifactId>
  <version>1</version><packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
      <version>{version}</version></dependency>
  </dependencies>
</project>
"""


class KafkaUnavailable(Exception):
    """Kafka's jars cannot be had on this machine (the message says why)."""


def kafka_classpath(version: str = KAFKA_VERSION) -> str:
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise KafkaUnavailable(f"{tool} is not on PATH")
    target = CACHE / f"kafka-{version}"
    done = target / ".complete"
    if not done.exists():
        target.mkdir(parents=True, exist_ok=True)
        (target / "pom.xml").write_text(_POM.format(version=version), encoding="utf-8")
        print(f"fetching Kafka {version}'s tools from Maven Central into {target} (once)...",
              file=sys.stderr)
        result = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(target / "pom.xml"), "dependency:copy-dependencies",
             f"-DoutputDirectory={target / 'lib'}", "-DincludeScope=runtime"],
            capture_output=True, text=True, timeout=900, check=False,
        )
        if result.returncode != 0:
            raise KafkaUnavailable(
                f"mvn could not fetch org.apache.kafka:kafka-tools:{version}: "
                f"{(result.stdout + result.stderr)[-600:]}"
            )
        done.write_text(version, encoding="utf-8")
    jars = sorted((target / "lib").glob("*.jar"))
    if not jars:
        raise KafkaUnavailable(f"{target / 'lib'} holds no jars; delete {target} to retry")
    return os.pathsep.join(str(j) for j in jars)


@dataclass(frozen=True)
class ToolRun:
    returncode: int
    stdout: str
    stderr: str


def run_kafka_tool(main_class: str, args: list[str], timeout_s: float = 120) -> ToolRun:
    result = subprocess.run(
        ["java", "-cp", kafka_classpath(), main_class, *args],
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )
    return ToolRun(result.returncode, result.stdout, result.stderr)
