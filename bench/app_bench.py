"""``kraft-spark bench app``: the Spark application end to end (local mode, 3 voters).

Measures, in one run:

* **launch → first commit**: from starting ``kraft-spark run`` until the first HTTP append is
  acknowledged (Spark start-up, Delta jars, the barrier stage, the first election);
* **commit → visible in Delta**: under a steady HTTP load of ``--rate`` appends/s, for each
  acknowledged record, the time from its acknowledgement to the Delta commit of the ``records``
  table that first holds it, and likewise of the ``snapshot`` table (Delta's own commit
  timestamps, read from the tables' histories);
* **the driver's CPU** during the steady load: the driver's Python process (observer, HTTP
  endpoint, materializer, delta-rs MERGEs) and its whole process tree (plus the Spark JVM with
  its executors and the voters), in cores (CPU seconds per second), from ``/proc``.

The appends carry the write token of the credentials file the application names in its summary
line (``bench.credentials``), as its users' clients do.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

from bench.credentials import Tokens, bearer
from bench.floor import percentile
from bench.processes import stop_group


def _post(url: str, body: Any, token: str) -> dict[str, Any]:
    req = urllib.request.Request(f"{url}/v1/records", json.dumps(body).encode(),
                                 {"Content-Type": "application/json", **bearer(token)},
                                 method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and every live descendant (by /proc parent links)."""
    from kraft_spark.proc_tree import descendants

    return sum(_cpu_seconds(pid) for pid in [root, *descendants(root)])


def run_app_bench(seconds: float, rate: float, http_port: int, log: Any) -> dict[str, Any]:
    from kraft_spark.spark_session import build_spark

    with tempfile.TemporaryDirectory(prefix="kraft-app-bench-") as tmp:
        launched = time.time()
        # KRAFT_SPARK_BENCH_LOG=<file>: keep the application's stderr (driver log, per-table
        # commit times) there instead of discarding it.
        log_path = os.environ.get("KRAFT_SPARK_BENCH_LOG") or os.devnull
        with open(log_path, "w", encoding="utf-8") as stderr:  # the child keeps its own copy
            proc = subprocess.Popen([sys.executable, "-m", "kraft_spark", "run", "--data-dir",
                                     tmp, "--http-port", str(http_port)],
                                    stdout=subprocess.PIPE, stderr=stderr, text=True,
                                    start_new_session=True)
        assert proc.stdout is not None
        try:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("kraft-spark run exited before it printed its endpoints "
                                   "(KRAFT_SPARK_BENCH_LOG=<file> keeps its log)")
            info = json.loads(line)
            url = info["http"]
            token = Tokens.printed(info, "kraft-spark run").write
            first = _post(url, {"key": "first", "value": 0}, token)
        except BaseException:
            stop_group(proc, 180)  # no application left running behind a failed start
            raise
        first_commit_s = time.time() - launched
        log(f"launch -> first commit: {first_commit_s:.1f} s (offset {first['base_offset']})")
        acks: list[tuple[int, float]] = []
        stop = threading.Event()

        def load() -> None:
            i = 0
            interval = 1.0 / rate
            next_at = time.monotonic()
            while not stop.is_set():
                result = _post(url, {"key": f"k{i % 100}", "value": i}, token)
                acks.append((result["base_offset"], time.time()))
                i += 1
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))

        worker = threading.Thread(target=load, daemon=True)
        log(f"steady load: {rate:.0f} appends/s for {seconds:.0f} s")
        cpu_start = (time.monotonic(), _cpu_seconds(proc.pid), _tree_cpu_seconds(proc.pid))
        worker.start()
        time.sleep(seconds)
        cpu_end = (time.monotonic(), _cpu_seconds(proc.pid), _tree_cpu_seconds(proc.pid))
        stop.set()
        worker.join(60)
        time.sleep(5)  # let the last micro-batch land
        proc.send_signal(signal.SIGTERM)
        proc.wait(180)
        proc.stdout.close()
        spark = build_spark("kraft-app-bench-reader", master="local[2]",
                            extra_conf={"spark.ui.enabled": "false"})
        from delta.tables import DeltaTable

        histories = {
            table: DeltaTable.forPath(spark, f"{info['warehouse']}/{table}").history()
            .select("timestamp", "userMetadata").collect()
            for table in ("records", "snapshot")
        }
        spark.stop()
    wall = cpu_end[0] - cpu_start[0]
    out: dict[str, Any] = {"launch_to_first_commit_s": round(first_commit_s, 2),
                           "appends": len(acks),
                           "driver_python_cores": round((cpu_end[1] - cpu_start[1]) / wall, 2),
                           "all_processes_cores": round((cpu_end[2] - cpu_start[2]) / wall, 2)}
    for table, history in histories.items():
        commits = sorted(
            (json.loads(h["userMetadata"])["last_offset"], h["timestamp"].timestamp())
            for h in history if h["userMetadata"]
        )
        delays = sorted(
            max(0.0, visible - acked_at)
            for offset, acked_at in acks
            if (visible := next((ts for last, ts in commits if last >= offset), None))
            is not None
        )
        prefix = "" if table == "records" else f"{table}_"
        out[f"{prefix}measured"] = len(delays)
        out[f"{prefix}visible_p50_ms"] = (
            round(percentile(delays, 0.5) * 1000, 1) if delays else None)
        out[f"{prefix}visible_p99_ms"] = (
            round(percentile(delays, 0.99) * 1000, 1) if delays else None)
        out[f"{prefix}delta_commits"] = len(commits)
    return out
