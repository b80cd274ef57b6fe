"""``kraft-spark bench snapshots``: what KIP-630 buys, measured (issue 22's benchmarks).

* **state memory**: RSS per live key of the state machine (1,000,000 keys, 100-byte values);
* **restart**: a node's start until it serves with its state rebuilt, and its RSS, against
  the history length, with and without a snapshot (each run in a fresh process);
* **catch-up**: an empty node (a wiped voter's situation: an observer takes the same Fetch /
  FetchSnapshot path) until it holds the leader's state, against the history length;
* **disk**: bytes in the node's directory while 200,000 records of 100 bytes are appended,
  with retention on;
* **commit latency while snapshots are written**: p50/p99 of sequential appends on a
  3-voter quorum whose voters write a snapshot of 100,000 keys every few seconds.

Each table is printed as it is measured; ``--json`` ends with one JSON line of everything.
"""

from __future__ import annotations

import asyncio
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kraft_spark.log.fs import RealFileSystem
from kraft_spark.log.meta import format_log_dir
from kraft_spark.log.segmented_log import SegmentedLog
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import KeyValueState
from kraft_spark.state.policy import SnapshotConfig
from kraft_spark.state.snapshot_store import FileSnapshotStore

CLUSTER = "bench-snapshots"
VALUE = b"v" * 100
Log = Callable[[str], None]


def _now_ms() -> int:
    return int(time.time() * 1000)


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------------------ state memory


def state_memory(keys: int) -> dict[str, Any]:
    before = rss_mib()
    state = KeyValueState()
    offset = 0
    for start in range(0, keys, 1000):
        batch = Batch(offset, 1, tuple(Record(b"key-%012d" % i, VALUE, 1_700_000_000_000)
                                       for i in range(start, min(start + 1000, keys))))
        state.apply(batch)
        offset = batch.next_offset
    after = rss_mib()
    return {"keys": keys, "rss_mib": round(after, 1),
            "bytes_per_key": round((after - before) * 1024 * 1024 / keys)}


# ------------------------------------------------------------------------------ restart


def build_node_dir(root: Path, history: int, keys: int, *, snapshot: bool) -> int:
    """A single voter's directory holding ``history`` records over ``keys`` keys; with
    ``snapshot`` its state is in a snapshot at the end and the log start is there (what
    retention leaves). Returns the log end offset."""
    log_dir = str(root / "node-0")
    format_log_dir(log_dir, cluster_id=CLUSTER, node_id=0, ignore_formatted=True)
    log = SegmentedLog.open(RealFileSystem(), log_dir, node_id=0)
    state = KeyValueState()
    offset = 0
    for start in range(0, history, 200):
        batch = Batch(offset, 1, tuple(Record(b"key-%09d" % (i % keys), VALUE, _now_ms())
                                       for i in range(start, min(start + 200, history))))
        log.append(batch)
        if snapshot:
            state.apply(batch)
        offset = batch.next_offset
        if offset % 100_000 < 200:
            log.flush()
    log.flush()
    if snapshot:
        store = FileSnapshotStore(RealFileSystem(), log.partition_dir)
        sid = OffsetAndEpoch(state.applied_offset, state.applied_epoch)
        store.write(sid, state.items(), state.producers.export(), 0)
        log.advance_start_offset(sid.offset)
    log.close()
    return offset


async def _serve_and_measure(root: Path, end: int) -> dict[str, Any]:
    from kraft_spark.net.config import NodeConfig
    from kraft_spark.net.node import RaftNode
    from kraft_spark.raft.config import QuorumConfig

    quorum = QuorumConfig(election_timeout_ms=50, fetch_timeout_ms=1000)
    node = RaftNode(NodeConfig(0, str(root / "node-0"), "127.0.0.1", 0,
                               {0: ("127.0.0.1", 1)}, quorum))
    started = time.perf_counter()
    await node.start()
    while node.keeper.state.applied_offset < end:
        await asyncio.sleep(0.005)
    seconds = time.perf_counter() - started
    keys = len(node.keeper.state)
    await node.stop(graceful=False)
    return {"seconds": round(seconds, 3), "rss_mib": round(rss_mib(), 1), "keys": keys}


def restart_child(root: str, end: int) -> None:
    """Run in a fresh process (``--child restart``): print one JSON line."""
    print(json.dumps(asyncio.run(_serve_and_measure(Path(root), end))))


def restart(history: int, keys: int, snapshot: bool, log: Log) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="kraft-bench-restart-"))
    try:
        log(f"  building {history:,} records over {keys:,} keys "
            f"({'snapshot + empty log' if snapshot else 'whole log'})...")
        end = build_node_dir(root, history, keys, snapshot=snapshot)
        disk = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        out = subprocess.run(
            [sys.executable, "-m", "bench.snapshots", "--child", "restart", str(root), str(end)],
            capture_output=True, text=True, check=True, timeout=3600,
        )
        result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        return {"history": history, "snapshot": snapshot, "disk_mib": round(disk / 2**20, 1),
                **result}
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------ catch-up


async def catch_up(history: int, keys: int, log: Log) -> dict[str, Any]:
    from kraft_spark.net.config import NodeConfig
    from kraft_spark.net.node import RaftNode
    from kraft_spark.raft.config import QuorumConfig

    root = Path(tempfile.mkdtemp(prefix="kraft-bench-catchup-"))
    try:
        log(f"  building {history:,} records over {keys:,} keys with a snapshot...")
        end = build_node_dir(root, history, keys, snapshot=True)
        quorum = QuorumConfig(election_timeout_ms=50, fetch_timeout_ms=1000)
        leader = RaftNode(NodeConfig(0, str(root / "node-0"), "127.0.0.1", 0,
                                     {0: ("127.0.0.1", 1)}, quorum))
        await leader.start()
        while leader.keeper.state.applied_offset < end:
            await asyncio.sleep(0.005)
        obs_dir = str(root / "observer")
        format_log_dir(obs_dir, cluster_id=CLUSTER, node_id=100, ignore_formatted=True)
        observer = RaftNode(NodeConfig(100, obs_dir, "127.0.0.1", 0,
                                       {0: ("127.0.0.1", leader.port)}, quorum))
        started = time.perf_counter()
        await observer.start()
        while observer.keeper.state.applied_offset < end:
            await asyncio.sleep(0.005)
        seconds = time.perf_counter() - started
        same = observer.keeper.state.view() == leader.keeper.state.view()
        await observer.stop(graceful=False)
        await leader.stop(graceful=False)
        return {"history": history, "keys": keys, "seconds": round(seconds, 3),
                "identical_state": same}
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------ disk


async def disk_bytes(records: int, log: Log) -> list[dict[str, Any]]:
    from kraft_spark.net.config import NodeConfig
    from kraft_spark.net.local_requests import local_answer
    from kraft_spark.net.node import RaftNode
    from kraft_spark.raft.config import QuorumConfig
    from kraft_spark.raft.messages import ProduceRequest

    root = Path(tempfile.mkdtemp(prefix="kraft-bench-disk-"))
    # Kafka's keys scaled down 10x so that 200k records cross them several times.
    snapshots = SnapshotConfig(max_bytes_between_snapshots=2 * 2**20, segment_bytes=2**20,
                               retention_bytes=10 * 2**20)
    try:
        log_dir = str(root / "node-0")
        format_log_dir(log_dir, cluster_id=CLUSTER, node_id=0, ignore_formatted=True)
        node = RaftNode(replace(NodeConfig(0, log_dir, "127.0.0.1", 0, {0: ("127.0.0.1", 1)},
                                           QuorumConfig(election_timeout_ms=50)),
                                snapshots=snapshots, log_preallocate=False))
        await node.start()
        while node.describe()["role"] != "leader":
            await asyncio.sleep(0.01)
        rows = []
        sent = 0
        while sent < records:
            now = _now_ms()
            futures = [local_answer(node, ProduceRequest(tuple(
                Record(b"key-%06d" % ((sent + j * 100 + i) % 10_000), VALUE, now)
                for i in range(100)),
                10_000)) for j in range(10)]
            await asyncio.gather(*futures)
            sent += 1000
            if sent % 20_000 == 0:
                await node.keeper.wait_idle()
                disk = sum(p.stat().st_size for p in Path(log_dir).rglob("*") if p.is_file())
                rows.append({"records": sent, "disk_mib": round(disk / 2**20, 2),
                             "log_start": node.log.start_offset(),
                             "snapshots": len(node.keeper.store.ids())})
        await node.stop(graceful=False)
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------ commit latency


async def _latency_run(keys: int, seconds: float, every_bytes: int, base_port: int,
                       log: Log) -> dict[str, Any]:
    from bench.native import local_security, start_local, stop_local
    from kraft_spark.client import AsyncQuorumClient, NewRecord

    with tempfile.TemporaryDirectory(prefix="kraft-bench-latency-") as tmp:
        proc, nodes = start_local(tmp, base_port, [
            "--set", f"metadata.log.max.record.bytes.between.snapshots={every_bytes}",
            "--set", "metadata.max.retention.bytes=-1"])
        client = AsyncQuorumClient([n["endpoint"] for n in nodes], retry_budget_s=30,
                                   **local_security(tmp).client_kwargs())
        try:
            log(f"  loading {keys:,} keys...")
            for start in range(0, keys, 1000):
                await client.append([NewRecord(b"key-%09d" % i, VALUE)
                                     for i in range(start, start + 1000)])
            log(f"  {seconds:.0f} s of sequential 1-record appends of 2 KiB...")
            big = b"x" * 2048
            latencies: list[float] = []
            deadline = time.perf_counter() + seconds
            i = 0
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                await client.append([NewRecord(b"key-%09d" % (i % keys), big)])
                latencies.append((time.perf_counter() - t0) * 1000)
                i += 1
        finally:
            await client.close()
            stop_local(proc, nodes)
        written = sum(p.read_text(errors="replace").count("wrote snapshot")
                      for p in Path(tmp, "logs").glob("node-*.log"))
    latencies.sort()
    return {"snapshots": "every 2 MiB" if every_bytes < 2**40 else "none",
            "snapshots_written": written, "keys": keys, "appends": len(latencies),
            "p50_ms": _pct(latencies, 50), "p99_ms": _pct(latencies, 99),
            "p999_ms": _pct(latencies, 99.9), "max_ms": round(latencies[-1], 2)}


async def latency_under_snapshots(seconds: float, keys: int, log: Log) -> list[dict[str, Any]]:
    """The same load on a ``kraft-spark local`` quorum (three processes) with snapshots of
    every voter's whole state every 2 MiB appended, and with none."""
    rows = []
    for every in (2 * 2**20, 2**50):
        rows.append(await _latency_run(keys, seconds, every, 19700, log))
    return rows


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    return round(values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))], 2)


def _free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


# ------------------------------------------------------------------------------ the command


def table(title: str, rows: list[dict[str, Any]]) -> str:
    if not rows:
        return f"{title}: no rows"
    cols = list(rows[0])
    lines = [title, "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def run_all(histories: list[int], log: Log) -> dict[str, Any]:
    out: dict[str, Any] = {}
    log("state memory (fresh process)...")
    child = subprocess.run([sys.executable, "-m", "bench.snapshots", "--child", "memory",
                            "1000000"], capture_output=True, text=True, check=True, timeout=900)
    out["state_memory"] = [json.loads(child.stdout.strip().splitlines()[-1])]
    print(table("State machine memory", out["state_memory"]), flush=True)
    out["restart"] = []
    for history in histories:
        for snap in (False, True):
            out["restart"].append(restart(history, 10_000, snap, log))
    print(table("Restart (start until serving with the state rebuilt), 10,000 live keys",
                out["restart"]), flush=True)
    out["catch_up"] = [asyncio.run(catch_up(h, 10_000, log)) for h in histories]
    print(table("Catch-up of an empty node from the leader's snapshot", out["catch_up"]),
          flush=True)
    log("disk bytes while appending 200,000 records...")
    out["disk"] = asyncio.run(disk_bytes(200_000, log))
    print(table("Disk held against records appended (retention 10 MiB, segments 1 MiB)",
                out["disk"]), flush=True)
    log("commit latency while snapshots are written...")
    out["latency"] = asyncio.run(latency_under_snapshots(20, 100_000, log))
    print(table("Commit latency (3 voter processes, 1 client, 2 KiB records), with and "
                "without snapshots of 100,000 keys",
                out["latency"]), flush=True)
    return out


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        if sys.argv[2] == "memory":
            print(json.dumps(state_memory(int(sys.argv[3]))))
        elif sys.argv[2] == "restart":
            restart_child(sys.argv[3], int(sys.argv[4]))
        sys.exit(0)
    print("use: kraft-spark bench snapshots", file=sys.stderr)
    sys.exit(2)


__all__ = ["run_all"]
