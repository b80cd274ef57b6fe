"""``kraft-spark bench compare``: kraft-spark against etcd and PySyncObj, on this machine, in
one run, with the physical floor measured alongside.

Systems, each started here on loopback as three members and stopped afterwards:

* ``kraft-spark HTTP``: ``kraft-spark local`` (3 voter processes, default timeouts, its
  default role-aware CPU placement) and its HTTP sidecar; ``kraft-spark HTTP in the leader``:
  the HTTP API embedded in the leader of the same quorum;
* ``kraft-spark native``: the asyncio client against the same quorum;
* ``kraft-spark app``: the full Spark application (``kraft-spark run``, what ``make run``
  starts, its materialization into Delta running): appends straight to the leader's own HTTP
  API (``GET /v1/quorum``'s ``leaderHttpUrl``), and through the driver's endpoint;
* ``etcd HTTP``: etcd 3.4 through its JSON gateway (``/v3/kv/put``; batches: a txn of 100 puts),
  as packaged (unpinned), then the same members pinned like kraft-spark's voters (the leader on
  the lower half of the CPUs, the others on the upper half); etcd targets are judged against
  the better of the two;
* ``PySyncObj HTTP``: ``bench.pysyncobj_node`` (journal file, no fsync).

Workloads per system: 1 sequential client, 16 and 256 concurrent clients with single records,
and 16 clients sending 100-record batches. Failover: kill -9 of the leader under load for
kraft-spark and etcd, and a graceful leader stop (SIGTERM: EndQuorumEpoch) for kraft-spark.
The Spark application adds commit → visible in Delta under a steady load.

Fairness on a shared machine: kraft-spark and etcd, the systems the targets compare, are up
at the same time and take turns point by point, ``--rounds`` times, each figure being the
median of its rounds (``interleaved_points``); the Spark application is started first and
takes its turns with them (it leads the results). Beside every measured point a separate
process counts the disk's stalls (``bench.disk_stalls``). PySyncObj runs once, afterwards.

Writes ``bench/results/compare-<UTC time>.{md,json,png}`` and ``bench/results/latest.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from bench.disk_stalls import DiskStallWatch
from bench.floor import measure_floor
from bench.plan import PLAN, Workload
from bench.report import APP_HTTP, APP_LEADER_HTTP, APP_ROWS
from bench.wrk import HttpWorkload, WrkResult, run_wrk

LEADER_HTTP = "kraft-spark HTTP in the leader"
SYSTEMS = ("kraft-http", "kraft-leader-http", "kraft-native", "etcd", "etcd-placed", "pysyncobj",
           "kraft-app")
# etcd-placed: etcd's members measured again (with "etcd") pinned the way kraft-spark local
# places its voters (EtcdCluster.place_like_kraft), so that no lead rests on placement alone.
ETCD_PLACED = "etcd HTTP, placed like kraft-spark"
Log = Callable[[str], None]
HTTP_AUTH = ("kraft-spark's HTTP requests carry a bearer token (write scope) of the credentials "
             "file it created, checked on every request, as its HTTP API requires by default; "
             "etcd and PySyncObj run without authentication, as packaged.")


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


# One measured point of a system: the workload -> its figures.
Measure = Callable[[Workload], dict[str, Any]]


def _stalls(watch: DiskStallWatch) -> dict[str, Any]:
    assert watch.report is not None
    return watch.report.as_dict()


def http_measure(workloads: tuple[HttpWorkload, HttpWorkload], seconds: float,
                 warmup_s: float, *, stall_dir: str,
                 around: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
                 ) -> Measure:
    """One HTTP point with wrk: a warm-up, then the measured run beside a disk-stall probe
    writing into ``stall_dir`` (the file system the systems' data is on). ``around``: a
    context entered for the whole point (etcd's pinning)."""
    single, batch = workloads

    def measure(workload: Workload) -> dict[str, Any]:
        requests = single if workload.records == 1 else batch
        with around() if around is not None else contextlib.nullcontext():
            if warmup_s > 0:
                run_wrk(requests, workload.connections, warmup_s, warmup_s=0)
            with DiskStallWatch(stall_dir) as watch:
                result = run_wrk(requests, workload.connections, seconds, warmup_s=0)
        return {**_point(result), "disk_stalls": _stalls(watch)}

    return measure


def native_measure(bootstrap: list[str], seconds: float, *, stall_dir: str,
                   security: Any) -> Measure:
    """One point of the asyncio client (its own 1 s warm-up, which the probe also sees),
    authenticated as ``security`` (a ``ClientSecurity``) says."""
    from bench.native import native_load

    def measure(workload: Workload) -> dict[str, Any]:
        with DiskStallWatch(stall_dir) as watch:
            row = asyncio.run(native_load(bootstrap, workload.connections, workload.records,
                                          seconds, workload.label,
                                          security=security)).row()
        point = {k: row[k] for k in ("ops_per_s", "records_per_s", "p50_ms", "p99_ms")}
        return {**point, "errors": 0, "disk_stalls": _stalls(watch)}

    return measure


def median_point(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One point from its rounds: the median of each figure (of the two middle ones with an
    even count), errors and disk stalls added up (the slowest write: the slowest of all);
    every round kept under ``rounds``."""
    point: dict[str, Any] = {}
    for key in ("ops_per_s", "records_per_s", "p50_ms", "p99_ms"):
        # A round with no completed request has no latency (None): the median of the others.
        values = [float(r[key]) for r in rounds if r.get(key) is not None]
        point[key] = round(statistics.median(values), 3) if values else None
    point["errors"] = sum(r.get("errors", 0) for r in rounds)
    stalls = [r["disk_stalls"] for r in rounds if "disk_stalls" in r]
    if stalls:
        point["disk_stalls"] = {
            "syncs": sum(s["syncs"] for s in stalls),
            "stalls": sum(s["stalls"] for s in stalls),
            "max_ms": max(s["max_ms"] for s in stalls),
            "stalled_ms": round(sum(s["stalled_ms"] for s in stalls), 1),
        }
    if len(rounds) > 1:
        point["rounds"] = rounds
    return point


def failed_point(exc: BaseException) -> dict[str, Any]:
    """A round that could not be measured: no figures (``median_point`` skips them), the
    cause kept for the report's JSON."""
    return {"ops_per_s": None, "records_per_s": None, "p50_ms": None, "p99_ms": None,
            "errors": 0, "failed": f"{type(exc).__name__}: {exc}"}


def interleaved_points(contenders: list[tuple[str, Measure]], rounds: int, seconds: float,
                       log: Log, settle: Callable[[], float] | None = None,
                       ) -> dict[str, dict[str, Any]]:
    """Every point of every contender, ``rounds`` times, the systems taking turns within each
    workload (the first one moving down each round), so that a slow period of a shared disk or
    CPU falls on all of them alike rather than on whichever ran then; each figure is the median
    of its rounds (``median_point``). Returns system -> workload -> point.

    ``settle``, called before every point: waits out a system's work left over from the point
    before (the Spark application materializing what it took) and returns the seconds it
    waited, logged when over one."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name, _ in contenders}
    for workload in PLAN:
        for r in range(rounds):
            turn = r % len(contenders)
            for name, measure in contenders[turn:] + contenders[:turn]:
                waited = settle() if settle is not None else 0.0
                if waited >= 1.0:
                    log(f"  (waited {waited:.1f} s for the application's materializer)")
                log(f"  {workload.label}, round {r + 1}/{rounds}: {name} ({seconds:g} s)")
                try:
                    point = measure(workload)
                except Exception as exc:
                    # One system failing one point (etcd without a leader during a disk stall
                    # of seconds, once) must not lose the run: the round counts as measuring
                    # nothing, and the report's median skips it.
                    point = failed_point(exc)
                runs[name].setdefault(workload.label, []).append(point)
                log(f"    {point}")
    return {name: {label: median_point(pts) for label, pts in by_label.items()}
            for name, by_label in runs.items()}


def sequential_points(name: str, measure: Measure, seconds: float,
                      log: Log) -> dict[str, Any]:
    """Every point of one system, once each (the systems that are not judged)."""
    points: dict[str, Any] = {}
    for workload in PLAN:
        log(f"  {name}: {workload.label} ({seconds:g} s)")
        points[workload.label] = measure(workload)
        log(f"    {points[workload.label]}")
    return points


def run_compare(*, seconds: float, warmup_s: float, systems: list[str], base_port: int,
                out_dir: str, visibility_s: float, command: str, log: Log,
                rounds: int = 3) -> dict[str, Any]:
    from bench.failover import etcd_failover_ms
    from bench.systems import EtcdCluster, KraftApp, KraftLocal, SyncObjCluster
    from bench.tools import ensure_tools, tool_versions

    ensure_tools(log)
    started = time.time()
    results: dict[str, Any] = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "machine": machine(), "command": command, "versions": tool_versions(),
            "seconds": seconds, "warmup_s": warmup_s, "rounds": rounds,
            "http_auth": HTTP_AUTH,
        },
        "systems": [],
    }
    with tempfile.TemporaryDirectory(prefix="kraft-compare-") as tmp, \
            contextlib.ExitStack() as running:
        log("physical floor: fsync (two kinds) and loopback round trip (6 s)")
        floor = measure_floor(tmp)
        results["floor"] = {**asdict(floor), "commit_floor_ms": round(floor.commit_floor_ms, 3)}
        log(f"  {results['floor']}")

        def http(workloads: tuple[HttpWorkload, HttpWorkload],
                 around: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
                 ) -> Measure:
            return http_measure(workloads, seconds, warmup_s, stall_dir=tmp, around=around)

        # The Spark application, kraft-spark local and etcd, the systems the targets compare,
        # run side by side and take turns point by point (interleaved_points). The application
        # starts first: Spark's start is the heaviest, and it is warm before anything is
        # measured (KraftApp waits for its first snapshot cycle).
        contenders: list[tuple[str, Measure]] = []
        if "kraft-app" in systems:
            log("starting the Spark application (kraft-spark run)")
            app = KraftApp(tempfile.mkdtemp(prefix="app-", dir=tmp), base_port + 40)
            running.callback(app.stop)

            def app_leader(app: KraftApp = app) -> Measure:
                # Where the leader is when each point starts (a relaunch may move it).
                def measure(workload: Workload) -> dict[str, Any]:
                    return http(app.leader_workloads())(workload)
                return measure

            contenders.append((APP_LEADER_HTTP, app_leader()))
            contenders.append((APP_HTTP, http(app.workloads())))
        kraft_wanted = {"kraft-http", "kraft-leader-http", "kraft-native"} & set(systems)
        if kraft_wanted:
            log("starting kraft-spark local (3 voters) with its HTTP sidecar and the HTTP API "
                "embedded in each node")
            kraft = KraftLocal(tempfile.mkdtemp(prefix="kraft-", dir=tmp), base_port,
                               base_port + 10)
            running.callback(kraft.stop)
            if "kraft-http" in systems:
                contenders.append(("kraft-spark HTTP", http(kraft.workloads())))
            if "kraft-leader-http" in systems:
                contenders.append((LEADER_HTTP, http(kraft.leader_workloads())))
            if "kraft-native" in systems:
                contenders.append(("kraft-spark native", native_measure(
                    kraft.bootstrap, seconds, stall_dir=tmp, security=kraft.security)))
        if "etcd" in systems:
            log("starting etcd (3 members)")
            etcd = EtcdCluster(tempfile.mkdtemp(prefix="etcd-", dir=tmp), base_port + 20)
            running.callback(etcd.stop)
            contenders.append(("etcd HTTP", http(etcd.workloads())))
            if "etcd-placed" in systems and etcd.can_place_like_kraft():
                # The same members, pinned for the length of each of their points only.
                contenders.append((ETCD_PLACED, http(etcd.workloads(), etcd.placed_like_kraft)))
        # One unmeasured point of each first (16 connections): the Spark application's JVM
        # compiles its hot paths in its first minutes, and etcd and the local quorum get the
        # same treatment.
        for name, measure in contenders:
            log(f"  warm-up (not measured): {name}, {PLAN[1].label}")
            measure(PLAN[1])
        # Before each point the Spark application's driver is caught up: its materializing of
        # a batch point (a million records) once fell on the next systems' points (local's
        # batch rows: 67,908 then 36,024 records/s in one run; wrk at its leader alone: 166,000).
        measured = interleaved_points(contenders, rounds, seconds, log,
                                      settle=app.settle if "kraft-app" in systems else None)
        running.close()  # stop both before the failover runs
        for name, _ in contenders:
            row: dict[str, Any] = {"name": name, "points": measured[name]}
            results["systems"].append(row)

        if kraft_wanted:
            from bench.native import failovers_ms

            kill_ms, handoff_ms = asyncio.run(failovers_ms(base_port + 50, log))
            for s in results["systems"]:  # kraft-spark local's rows (not the application's)
                if s["name"].startswith("kraft-spark") and s["name"] not in APP_ROWS:
                    s["failover_kill_ms"], s["handoff_ms"] = kill_ms, handoff_ms

        if "etcd" in systems:
            log("  etcd: kill -9 of the leader under load")
            etcd = EtcdCluster(tempfile.mkdtemp(prefix="etcd-", dir=tmp), base_port + 20)
            try:
                kill = etcd_failover_ms(etcd)
                log(f"    {kill} ms")
            finally:
                etcd.stop()
            for s in results["systems"]:
                if s["name"] == "etcd HTTP":
                    s["failover_kill_ms"] = kill

        if "pysyncobj" in systems:
            log("starting PySyncObj (3 nodes)")
            pso = SyncObjCluster(tempfile.mkdtemp(prefix="pso-", dir=tmp), base_port + 30)
            try:
                results["systems"].append({
                    "name": "PySyncObj HTTP", "note": "journal not fsynced",
                    "points": sequential_points("PySyncObj HTTP", http(pso.workloads()),
                                                seconds, log)})
            finally:
                pso.stop()

        if "kraft-app" in systems:
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
