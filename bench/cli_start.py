"""``kraft-spark bench cli``: what one short command costs, ``kraft-spark`` beside ``etcdctl``.

One ``kraft-spark local --http-insecure --node-http-base-port B --etcd-base-port E`` (three
nodes; each serves the store's HTTP API and etcd's gRPC API over the same state), then, taking
turns so that both meet the same load, ``rounds`` runs of each command:

* ``kraft-spark kv get k --endpoint <node 0>`` against ``etcdctl --endpoints <node 0> get k``
  (both linearizable reads of the same key on the same node);
* ``kraft-spark kv put k v`` against ``etcdctl put k v``;
* ``kraft-spark --help``, and ``python -c pass`` (the interpreter's own start: the floor of any
  Python command line).

A run is a process: its wall time from spawn to exit and its CPU time (user + system, from
``wait4``'s rusage). Every command runs as a user runs it: the ``kraft-spark`` console script
beside this interpreter, with byte code cached (``PYTHONDONTWRITEBYTECODE`` is dropped from the
environment: with it set every start compiles the modules again, which no installed copy does),
after one untimed run that writes the cache. The issue's goal (66): ``kv get`` within 3x of
``etcdctl get``'s wall time.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.locks import kraft_spark_command
from bench.report import save_results

Log = Callable[[str], None]


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one process running ``argv``; raises if it fails."""
    began = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {err.strip()}")
    return wall, usage.ru_utime + usage.ru_stime


def _summary(samples: list[tuple[float, float]]) -> dict[str, float]:
    walls = sorted(w * 1000 for w, _ in samples)
    return {"runs": len(samples), "wall_p50_ms": statistics.median(walls),
            "wall_p90_ms": walls[min(len(walls) - 1, int(len(walls) * 0.9))],
            "cpu_mean_ms": statistics.fmean(c * 1000 for _, c in samples)}


def _start_local(data_dir: str, base_port: int, log: Log) -> tuple[subprocess.Popen[str],
                                                                   str, str]:
    """``kraft-spark local`` started: (the process, node 0's HTTP URL, its etcd address)."""
    cmd = [*kraft_spark_command(), "local", "--voters", "3", "--data-dir", data_dir,
           "--base-port", str(base_port), "--node-http-base-port", str(base_port + 10),
           "--etcd-base-port", str(base_port + 20), "--http-insecure", "--quorum-insecure"]
    log(" ".join(cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    nodes = [json.loads(proc.stdout.readline()) for _ in range(3)]
    return proc, str(nodes[0]["http"]), str(nodes[0]["etcd"])


def _ready(kraft: list[str], url: str, env: dict[str, str]) -> None:
    """Until a write goes through (a leader is elected)."""
    deadline = time.monotonic() + 30
    while True:
        done = subprocess.run([*kraft, "kv", "put", "k", "v", "--endpoint", url], env=env,
                              capture_output=True, timeout=30, check=False)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no leader in 30 s: {done.stderr.decode(errors='replace')}")
        time.sleep(0.3)


def measure(rounds: int, base_port: int, log: Log) -> dict[str, Any]:
    if shutil.which("etcdctl") is None:
        raise RuntimeError("etcdctl is not installed (Debian: apt-get install etcd-client)")
    kraft = kraft_spark_command()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as data_dir:
        local, url, etcd = _start_local(data_dir, base_port, log)
        try:
            _ready(kraft, url, env)
            commands = {
                "kraft-spark kv get": [*kraft, "kv", "get", "k", "--endpoint", url],
                "etcdctl get": ["etcdctl", f"--endpoints={etcd}", "get", "k"],
                "kraft-spark kv put": [*kraft, "kv", "put", "k", "v", "--endpoint", url],
                "etcdctl put": ["etcdctl", f"--endpoints={etcd}", "put", "k", "v"],
                "kraft-spark --help": [*kraft, "--help"],
                "python -c pass": [sys.executable, "-c", "pass"],
            }
            for argv in commands.values():  # writes the byte code caches; not timed
                _run(argv, env)
            samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
            for _ in range(rounds):
                for name, argv in commands.items():
                    samples[name].append(_run(argv, env))
        finally:
            local.terminate()
            local.wait(30)
    points = {name: _summary(s) for name, s in samples.items()}
    ratios = {
        "get_wall_ratio": points["kraft-spark kv get"]["wall_p50_ms"]
        / points["etcdctl get"]["wall_p50_ms"],
        "put_wall_ratio": points["kraft-spark kv put"]["wall_p50_ms"]
        / points["etcdctl put"]["wall_p50_ms"]}
    return {"rounds": rounds, "points": points, **ratios}


def format_result(result: dict[str, Any]) -> str:
    lines = [f"One short command, {result['rounds']} runs each (taking turns), this machine:", "",
             "| command | wall p50 ms | wall p90 ms | CPU ms (mean) |", "|---|---|---|---|"]
    for name, point in result["points"].items():
        lines.append(f"| `{name}` | {point['wall_p50_ms']:.1f} | {point['wall_p90_ms']:.1f} | "
                     f"{point['cpu_mean_ms']:.1f} |")
    lines += ["", f"`kv get` / `etcdctl get` wall (p50): {result['get_wall_ratio']:.2f}x "
              "(goal: at most 3x); "
              f"`kv put` / `etcdctl put`: {result['put_wall_ratio']:.2f}x"]
    return "\n".join(lines)


def main(rounds: int, base_port: int, out_dir: str, log: Log) -> int:
    result = measure(rounds, base_port, log)
    text = format_result(result)
    print(text)
    save_results(out_dir, "cli", result, text)
    return 0
