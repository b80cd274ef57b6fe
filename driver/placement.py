"""Where each voter task should run: the host it ran on before, so its log is reused when the
host survives (Spark's preferred locations for the barrier stage's partitions).

The hosts come from the tasks' hellos (the address Spark's scheduler knows their executor by)
and are kept in ``<data-dir>/voter-hosts.json`` across restarts of the application. PySpark's
``parallelize`` takes no location preferences, so the stage's parent RDD is made on the JVM
with ``SparkContext.makeRDD(Seq[(T, Seq[host])])`` and wrapped as a Python RDD (its elements
are never read: a voter task needs only its partition id). A preference is a wish: when the host
is gone, Spark runs the task elsewhere after ``spark.locality.wait``, and the voter there starts
with a fresh disk (caught up from the leader, then replaced in the voter set, KIP-853).
"""

from __future__ import annotations

import json
import logging
import os
import socket
from typing import Any

from kraft_spark.log.checkpoints import atomic_write
from kraft_spark.log.fs import RealFileSystem

log = logging.getLogger("kraft_spark.driver")
HOSTS_FILE = "voter-hosts.json"


def load_hosts(data_dir: str) -> dict[int, str]:
    try:
        with open(os.path.join(data_dir, HOSTS_FILE), encoding="utf-8") as fh:
            return {int(k): str(v) for k, v in json.load(fh).items() if v}
    except (OSError, ValueError, AttributeError):
        return {}


def save_hosts(data_dir: str, hellos: dict[int, Any]) -> None:
    hosts = load_hosts(data_dir)
    hosts.update({v: str(h["executor_host"]) for v, h in hellos.items()
                  if h.get("executor_host")})
    atomic_write(RealFileSystem(), os.path.join(data_dir, HOSTS_FILE),
                 json.dumps({str(k): v for k, v in sorted(hosts.items())}).encode())


def voter_rdd(sc: Any, count: int, hosts: dict[int, str]) -> Any:
    """``count`` one-element partitions, partition i preferring ``hosts[i]`` (if any)."""
    if not any(i in hosts for i in range(count)):
        return sc.parallelize(range(count), count)
    from pyspark.rdd import RDD
    from pyspark.serializers import CPickleSerializer

    jvm = sc._jvm
    serializer = CPickleSerializer()
    convert = jvm.scala.jdk.javaapi.CollectionConverters
    items = jvm.java.util.ArrayList()
    for i in range(count):
        where = jvm.java.util.ArrayList()
        if i in hosts:
            where.add(hosts[i])
        items.add(jvm.scala.Tuple2(bytearray(serializer.dumps(i)),  # type: ignore[no-untyped-call]
                                   convert.asScala(where).toSeq()))
    byte_array = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    parent = sc._jsc.sc().makeRDD(convert.asScala(items).toSeq(), byte_array)
    log.info("voter tasks prefer hosts %s", {i: hosts[i] for i in range(count) if i in hosts})
    return RDD(parent.toJavaRDD(), sc, serializer)


# A custom Spark resource, one unit per worker (README: deploying on a cluster): when the
# executors have it, each voter task asks for one, so no two voters share an executor (two
# voters of three on one host would make that host a majority) while the executor's other
# cores stay free for the driver's Delta jobs.
VOTER_RESOURCE = "voter"


def voter_stage(sc: Any, count: int, hosts: dict[int, str], task: Any) -> Any:
    """The barrier stage hosting ``count`` voters, placed as ``voter_rdd`` says."""
    stage = voter_rdd(sc, count, hosts).barrier().mapPartitions(task)
    if not sc.getConf().get(f"spark.executor.resource.{VOTER_RESOURCE}.amount"):
        return stage
    from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

    requests = TaskResourceRequests().cpus(1).resource(VOTER_RESOURCE, 1)
    return stage.withResources(ResourceProfileBuilder().require(requests).build)


def is_local_master(spark: Any) -> bool:
    """Whether every executor is this driver's own JVM (``local`` / ``local[N]``)."""
    return str(spark.sparkContext.master).startswith("local[") or str(
        spark.sparkContext.master) == "local"


def driver_host(master: str, spark: Any = None) -> str:
    """Where voter tasks reach the driver: loopback in local mode, else the address Spark's
    executors reach it by (spark.driver.host), else this host's name."""
    if master.startswith("local"):
        return "127.0.0.1"
    host = spark.sparkContext.getConf().get("spark.driver.host") if spark is not None else None
    if host:
        return str(host)
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
