"""``kraft-spark bench quorum``: the native client against a local 3-voter quorum.

Starts ``kraft-spark local`` (real processes, real fsync, loopback TCP) with the default
timeouts, then runs, each for ``--seconds`` after a short warm-up:

* 1 client, sequential single-record appends: commit latency p50 / p99;
* 16 and 256 concurrent clients (one connection each), single records: appends/s;
* 16 concurrent clients with 100-record batches: records/s;
* failover: kill -9 of the leader under load → first commit after it; graceful stop of the
  leader (SIGTERM: it resigns with EndQuorumEpoch) → first commit after it.

The load generator is one asyncio process on the same 2-core machine as the three nodes, so the
figures include its own cost.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from bench.floor import percentile
from bench.processes import stop_group
from kraft_spark.client import AsyncQuorumClient, ClientError, NewRecord
from kraft_spark.client.security import ClientSecurity
from kraft_spark.quorum_auth import ADMIN_PROPERTIES

VALUE = b"v" * 100


@dataclass
class Point:
    name: str
    ops: int = 0
    records: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        lat = sorted(self.latencies)

        def pct(p: float) -> float | None:
            return round(percentile(lat, p) * 1000, 3) if lat else None

        return {
            "workload": self.name,
            "ops_per_s": round(self.ops / self.seconds, 1) if self.seconds else 0.0,
            "records_per_s": round(self.records / self.seconds, 1) if self.seconds else 0.0,
            "p50_ms": pct(0.50),
            "p99_ms": pct(0.99),
        }


async def native_load(bootstrap: list[str], clients: int, batch: int, seconds: float,
                      name: str, *, security: ClientSecurity) -> Point:
    warmup_s = 1.0
    point = Point(name)
    pool = [AsyncQuorumClient(bootstrap, retry_budget_s=30, **security.client_kwargs())
            for _ in range(clients)]
    stop_at = 0.0
    measuring = False

    async def worker(client: AsyncQuorumClient, n: int) -> None:
        i = 0
        while time.monotonic() < stop_at:
            records = [NewRecord(b"k%d-%d-%d" % (n, i, j), VALUE) for j in range(batch)]
            started = time.perf_counter()
            try:
                await client.append(records)
            except ClientError:
                continue
            if measuring:
                point.latencies.append(time.perf_counter() - started)
                point.ops += 1
                point.records += batch
            i += 1

    try:
        stop_at = time.monotonic() + warmup_s
        await asyncio.gather(*(worker(c, n) for n, c in enumerate(pool)))
        measuring = True
        began = time.monotonic()
        stop_at = began + seconds
        await asyncio.gather(*(worker(c, n) for n, c in enumerate(pool)))
        point.seconds = time.monotonic() - began
    finally:
        for c in pool:
            await c.close()
    return point


async def native_failover(bootstrap: list[str], pids: dict[int, int], sig: int,
                          name: str, *, security: ClientSecurity) -> float:
    """Kill (or stop) the leader under a 4-client load; seconds until the first commit of a
    later epoch (acknowledgements still in flight from the old leader do not count)."""
    probe = AsyncQuorumClient(bootstrap, **security.client_kwargs())
    info = await probe.describe_quorum()
    leader, epoch = info.leader_id, info.leader_epoch
    await probe.close()
    clients = [AsyncQuorumClient(bootstrap, retry_budget_s=30, request_timeout_s=2,
                                 **security.client_kwargs()) for _ in range(4)]
    acks: list[float] = []
    done = False

    async def worker(client: AsyncQuorumClient) -> None:
        while not done:
            try:
                result = await client.append([NewRecord(b"f", VALUE)])
                if result.epoch > epoch:
                    acks.append(time.monotonic())
            except ClientError:
                pass

    tasks = [asyncio.ensure_future(worker(c)) for c in clients]
    await asyncio.sleep(1.0)
    hit = time.monotonic()
    os.kill(pids[leader], sig)
    while not any(a > hit for a in acks) and time.monotonic() < hit + 30:
        await asyncio.sleep(0.001)
    done = True
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in clients:
        await c.close()
    after = [a for a in acks if a > hit]
    if not after:
        raise RuntimeError(f"{name}: no commit within 30 s")
    return after[0] - hit


def start_local(data_dir: str, base_port: int, extra: list[str]) -> tuple[subprocess.Popen[str],
                                                                         list[dict[str, Any]]]:
    cmd = [sys.executable, "-m", "kraft_spark", "local", "--voters", "3", "--data-dir",
           data_dir, "--base-port", str(base_port), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    nodes = [json.loads(proc.stdout.readline()) for _ in range(3)]
    return proc, nodes


def local_security(data_dir: str) -> ClientSecurity:
    """How a client authenticates to the ``kraft-spark local`` of ``data_dir`` (SASL/PLAIN as
    its administrator: the default a user gets)."""
    return ClientSecurity.from_file(os.path.join(data_dir, ADMIN_PROPERTIES))


def stop_local(proc: subprocess.Popen[str], nodes: list[dict[str, Any]]) -> None:
    stop_group(proc, 20)


async def run_native(seconds: float, base_port: int, log: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kraft-bench-") as tmp:
        proc, nodes = start_local(tmp, base_port, [])
        bootstrap = [n["endpoint"] for n in nodes]
        try:
            for clients, batch, name in ((1, 1, "1 client, single records"),
                                         (16, 1, "16 clients, single records"),
                                         (256, 1, "256 clients, single records"),
                                         (16, 100, "16 clients, 100-record batches")):
                log(f"running: {name} ({seconds:.0f} s)")
                rows.append((await native_load(bootstrap, clients, batch, seconds, name,
                                               security=local_security(tmp))).row())
                log(f"  {rows[-1]}")
        finally:
            stop_local(proc, nodes)
    kill_ms, graceful_ms = await failovers_ms(base_port, log)
    rows.append({"workload": "failover: kill -9 leader -> next commit", "ms": kill_ms})
    rows.append({"workload": "failover: graceful leader stop -> next commit", "ms": graceful_ms})
    return rows


async def failovers_ms(base_port: int, log: Any) -> tuple[float, float]:
    """(kill -9, graceful stop) of the leader under load → first commit of a later epoch, in
    ms; each on a fresh ``kraft-spark local`` quorum with the default timeouts."""
    figures: list[float] = []
    for sig, name in ((signal.SIGKILL, "kill -9 of the leader"),
                      (signal.SIGTERM, "graceful leader stop")):
        with tempfile.TemporaryDirectory(prefix="kraft-bench-") as tmp:
            proc, nodes = start_local(tmp, base_port, [])
            try:
                log(f"running: {name} under load")
                pids = {n["node_id"]: n["pid"] for n in nodes}
                seconds_taken = await native_failover([n["endpoint"] for n in nodes], pids,
                                                      sig, name,
                                                      security=local_security(tmp))
                figures.append(round(seconds_taken * 1000, 1))
                log(f"  {figures[-1]} ms")
            finally:
                stop_local(proc, nodes)
    return figures[0], figures[1]


def format_table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| workload | appends/s | records/s | p50 ms | p99 ms |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "ms" in r:
            out.append(f"| {r['workload']} | | | {r['ms']} | |")
        else:
            out.append(f"| {r['workload']} | {r['ops_per_s']} | {r['records_per_s']} | "
                       f"{r['p50_ms']} | {r['p99_ms']} |")
    return "\n".join(out)

