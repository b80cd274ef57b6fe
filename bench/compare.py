"""``kraft-spark bench compare``: kraft-spark against etcd and PySyncObj, on this machine, in
one run, with the physical floor measured alongside.

Systems, each started here on loopback as three members and stopped afterwards:

* ``kraft-spark HTTP``: ``kraft-spark local`` (3 voter processes, default timeouts, its
  default role-aware CPU placement) and its HTTP sidecar; ``kraft-spark HTTP in the leader``:
  the HTTP API embedded in the leader of the same quorum;
* ``kraft-spark native``: the asyncio client against the same quorum;
* ``kraft-spark app``: the full Spark application (``kraft-spark run``) and its sidecar;
* ``etcd HTTP``: etcd 3.4 through its JSON gateway (``/v3/kv/put``; batches: a txn of 100 puts),
  as packaged (unpinned), then the same members pinned like kraft-spark's voters (the leader on
  the lower half of the CPUs, the others on the upper half); etcd targets are judged against
  the better of the two;
* ``PySyncObj HTTP``: ``bench.pysyncobj_node`` (journal file, no fsync).

Workloads per system: 1 sequential client, 16 and 256 concurrent clients with single records,
and 16 clients sending 100-record batches. Failover: kill -9 of the leader under load for
kraft-spark and etcd, and a graceful leader stop (SIGTERM: EndQuorumEpoch) for kraft-spark.
The Spark application adds commit → visible in Delta under a steady load.

Writes ``bench/results/compare-<UTC time>.{md,json,png}`` and ``bench/results/latest.md``.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from bench.disk_stalls import DiskStallWatch
from bench.floor import measure_floor
from bench.wrk import HttpWorkload, WrkResult, run_wrk

LEADER_HTTP = "kraft-spark HTTP in the leader"
SYSTEMS = ("kraft-http", "kraft-leader-http", "kraft-native", "etcd", "etcd-placed", "pysyncobj",
           "kraft-app")
# etcd-placed: etcd's members measured again (with "etcd") pinned the way kraft-spark local
# places its voters (EtcdCluster.place_like_kraft), so that no lead rests on placement alone.
ETCD_PLACED = "etcd HTTP, placed like kraft-spark"
CONNECTIONS = (1, 16, 256)
BATCH_CONNECTIONS = 16
Log = Callable[[str], None]


def machine() -> str:
    cores = os.cpu_count() or 0
    mem_gib = 0.0
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem_gib = int(line.split()[1]) / 1024 / 1024
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cores} cores ({model}), {mem_gib:.0f} GiB RAM, Linux {platform.release()}"


def _point(result: WrkResult) -> dict[str, Any]:
    return {"ops_per_s": round(result.ok_per_s, 1), "records_per_s": round(result.records_per_s, 1),
            "p50_ms": round(result.p50_ms, 3), "p99_ms": round(result.p99_ms, 3),
            "errors": result.errors}


def http_points(name: str, workloads: tuple[HttpWorkload, HttpWorkload], seconds: float,
                warmup_s: float, log: Log, *, stall_dir: str) -> dict[str, Any]:
    """Every HTTP point of one system; each measured run beside a disk-stall probe writing
    into ``stall_dir`` (the file system the systems' data is on)."""
    single, batch = workloads
    points: dict[str, Any] = {}
    plan = [(f"{c} client{'s' if c > 1 else ''}", single, c) for c in CONNECTIONS]
    plan.append((f"{BATCH_CONNECTIONS} clients, 100-record batches", batch, BATCH_CONNECTIONS))
    for label, workload, connections in plan:
        log(f"  {name}: {label} ({seconds:g} s)")
        if warmup_s > 0:
            run_wrk(workload, connections, warmup_s, warmup_s=0)
        with DiskStallWatch(stall_dir) as watch:
            result = run_wrk(workload, connections, seconds, warmup_s=0)
        points[label] = _point(result)
        points[label]["disk_stalls"] = _stalls(watch)
        log(f"    {points[label]}")
    return points


def _stalls(watch: DiskStallWatch) -> dict[str, Any]:
    assert watch.report is not None
    return watch.report.as_dict()


def native_points(bootstrap: list[str], seconds: float, log: Log, *,
                  stall_dir: str) -> dict[str, Any]:
    from bench.native import native_load

    points: dict[str, Any] = {}
    for label, clients, batch in (("1 client", 1, 1), ("16 clients", 16, 1),
                                  ("256 clients", 256, 1),
                                  ("16 clients, 100-record batches", 16, 100)):
        log(f"  kraft-spark native: {label} ({seconds:g} s)")
        # The probe also sees the load generator's 1 s warm-up (it runs inside native_load).
        with DiskStallWatch(stall_dir) as watch:
            row = asyncio.run(native_load(bootstrap, clients, batch, seconds, label)).row()
        points[label] = {k: row[k] for k in ("ops_per_s", "records_per_s", "p50_ms", "p99_ms")}
        points[label]["errors"] = 0
        points[label]["disk_stalls"] = _stalls(watch)
        log(f"    {points[label]}")
    return points


def run_compare(*, seconds: float, warmup_s: float, systems: list[str], base_port: int,
                out_dir: str, visibility_s: float, command: str, log: Log) -> dict[str, Any]:
    from bench.failover import etcd_failover_ms
    from bench.systems import EtcdCluster, KraftApp, KraftLocal, SyncObjCluster
    from bench.tools import ensure_tools, tool_versions

    ensure_tools(log)
    started = time.time()
    results: dict[str, Any] = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "machine": machine(), "command": command, "versions": tool_versions(),
            "seconds": seconds, "warmup_s": warmup_s,
        },
        "systems": [],
    }
    with tempfile.TemporaryDirectory(prefix="kraft-compare-") as tmp:
        log("physical floor: fsync (two kinds) and loopback round trip (6 s)")
        floor = measure_floor(tmp)
        results["floor"] = {**asdict(floor), "commit_floor_ms": round(floor.commit_floor_ms, 3)}
        log(f"  {results['floor']}")

        def points(name: str, workloads: tuple[HttpWorkload, HttpWorkload]) -> dict[str, Any]:
            return http_points(name, workloads, seconds, warmup_s, log, stall_dir=tmp)

        if {"kraft-http", "kraft-leader-http", "kraft-native"} & set(systems):
            log("starting kraft-spark local (3 voters) with its HTTP sidecar and the HTTP API "
                "embedded in each node")
            kraft = KraftLocal(tempfile.mkdtemp(prefix="kraft-", dir=tmp), base_port,
                               base_port + 10)
            try:
                if "kraft-http" in systems:
                    results["systems"].append({"name": "kraft-spark HTTP", "points": points(
                        "kraft-spark HTTP", kraft.workloads())})
                if "kraft-leader-http" in systems:
                    results["systems"].append({"name": LEADER_HTTP, "points": points(
                        LEADER_HTTP, kraft.leader_workloads())})
                if "kraft-native" in systems:
                    results["systems"].append({"name": "kraft-spark native",
                                               "points": native_points(
                                                   kraft.bootstrap, seconds, log, stall_dir=tmp)})
            finally:
                kraft.stop()
            from bench.native import failovers_ms

            kill_ms, handoff_ms = asyncio.run(failovers_ms(base_port + 50, log))
            for s in results["systems"]:
                if s["name"].startswith("kraft-spark"):
                    s["failover_kill_ms"], s["handoff_ms"] = kill_ms, handoff_ms

        if "etcd" in systems:
            log("starting etcd (3 members)")
            etcd = EtcdCluster(tempfile.mkdtemp(prefix="etcd-", dir=tmp), base_port + 20)
            placed: dict[str, Any] | None = None
            try:
                row: dict[str, Any] = {"name": "etcd HTTP", "points": points(
                    "etcd HTTP", etcd.workloads())}
                # The same members once more, pinned (only after the unpinned points).
                if "etcd-placed" in systems and etcd.place_like_kraft():
                    placed = {"name": ETCD_PLACED, "points": points(
                        ETCD_PLACED, etcd.workloads())}
            finally:
                etcd.stop()
            log("  etcd: kill -9 of the leader under load")
            etcd = EtcdCluster(tempfile.mkdtemp(prefix="etcd-", dir=tmp), base_port + 20)
            try:
                row["failover_kill_ms"] = etcd_failover_ms(etcd)
                log(f"    {row['failover_kill_ms']} ms")
            finally:
                etcd.stop()
            results["systems"].append(row)
            if placed is not None:
                results["systems"].append(placed)

        if "pysyncobj" in systems:
            log("starting PySyncObj (3 nodes)")
            pso = SyncObjCluster(tempfile.mkdtemp(prefix="pso-", dir=tmp), base_port + 30)
            try:
                results["systems"].append({
                    "name": "PySyncObj HTTP", "note": "journal not fsynced",
                    "points": points("PySyncObj HTTP", pso.workloads())})
            finally:
                pso.stop()

        if "kraft-app" in systems:
            log("starting the Spark application (kraft-spark run)")
            app = KraftApp(tempfile.mkdtemp(prefix="app-", dir=tmp), base_port + 40)
            try:
                results["systems"].append({"name": "kraft-spark app HTTP", "points": points(
                    "kraft-spark app HTTP", app.workloads())})
            finally:
                app.stop()
            from bench.app_bench import run_app_bench

            rate = 100.0
            log(f"Spark application: commit → Delta visibility ({visibility_s:g} s at "
                f"{rate:g}/s)")
            vis = run_app_bench(visibility_s, rate, base_port + 41, log)
            results["visibility"] = {**vis, "rate": rate}
            log(f"  {vis}")

    results["meta"]["took_s"] = round(time.time() - started, 1)
    write_results(results, out_dir, log)
    return results


def write_results(results: dict[str, Any], out_dir: str, log: Log) -> None:
    from bench.report import markdown, plot

    os.makedirs(out_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = os.path.join(out_dir, f"compare-{stamp}")
    page = markdown(results)
    page += f"\n![plot](compare-{stamp}.png)\n"
    with open(base + ".md", "w", encoding="utf-8") as fh:
        fh.write(page)
    with open(base + ".json", "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    plot(results, base + ".png")
    shutil.copyfile(base + ".md", os.path.join(out_dir, "latest.md"))
    log(f"wrote {base}.md, .json and .png (and latest.md)")


def main_args(argv: list[str]) -> str:
    """The exact command, as the results header shows it."""
    return "kraft-spark " + " ".join(shlex.quote(a) for a in argv)


def command_line() -> str:
    return main_args(sys.argv[1:])
