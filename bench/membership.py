"""``kraft-spark bench voters``: KIP-853's costs, measured (issue 23's benchmarks).

On ``kraft-spark local`` (3 voters, Kafka's default timings) plus two ``kraft-spark node``
observers, with one client appending single records back to back the whole time:

* **add / remove**: time from AddRaftVoter (RemoveRaftVoter) sent to its commit answered, for
  an observer that is caught up; the quorum grows 3 -> 5 and shrinks back, several rounds;
* **appends during a change**: p50 / p99 / max latency of the appends that started while a
  change was in flight, against those that did not;
* **failover with the new set**: with 5 voters, kill -9 the leader; time until the next
  acknowledged append (the new leader needs 3 of the 4 left).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.native import local_security
from kraft_spark.client import ClientError, NewRecord, QuorumClient
from kraft_spark.client.security import ClientSecurity
from kraft_spark.log.meta import format_log_dir, read_meta_properties
from kraft_spark.quorum_auth import SUPER_USERS, USERS_FILE
from kraft_spark.raft.voter_set import Endpoint, parse_directory

Say = Any


class _Appender(threading.Thread):
    """Appends one record at a time; keeps (start, latency s, acknowledged) per append."""

    def __init__(self, bootstrap: list[str], security: ClientSecurity) -> None:
        super().__init__(daemon=True)
        self.client = QuorumClient(bootstrap, retry_budget_s=30.0, request_timeout_s=2.0,
                                   **security.client_kwargs())
        self.samples: list[tuple[float, float]] = []
        self.acks: list[tuple[float, int]] = []  # (when, epoch of the batch)
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            start = time.monotonic()
            try:
                result = self.client.append([NewRecord(b"bench-%d" % n, b"x" * 100)],
                                            timeout_s=30)
            except ClientError:
                self.errors += 1
                continue
            end = time.monotonic()
            self.samples.append((start, end - start))
            self.acks.append((end, result.epoch))
            n += 1


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _observer(data: Path, node_id: int, port: int, voters: str) -> tuple[subprocess.Popen[bytes],
                                                                          Endpoint, Any]:
    cluster = (data / "cluster.id").read_text().strip()
    log_dir = data / f"node-{node_id}"
    format_log_dir(str(log_dir), cluster_id=cluster, node_id=node_id, ignore_formatted=True)
    conf = data / f"node-{node_id}.properties"
    conf.write_text(f"node.id={node_id}\nlog.dirs={log_dir}\n"
                    f"listeners=CONTROLLER://127.0.0.1:{port}\n"
                    f"controller.quorum.voters={voters}\n"
                    # the quorum's listeners take SASL/PLAIN (kraft_spark.quorum_auth)
                    f"kraft.sasl.plain.users.file={data / USERS_FILE}\n"
                    f"super.users={SUPER_USERS}\n")
    out = open(data / "logs" / f"node-{node_id}.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "kraft_spark", "node", "--config", str(conf)],
                            stdout=out, stderr=subprocess.STDOUT)
    meta = read_meta_properties(str(log_dir))
    assert meta is not None
    return proc, Endpoint("CONTROLLER", "127.0.0.1", port), parse_directory(meta.directory_id)


def run(rounds: int, base_port: int, say: Say) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="kraft-bench-voters-"))
    data = tmp / "data"
    local = subprocess.Popen(
        [sys.executable, "-m", "kraft_spark", "local", "--voters", "3", "--data-dir", str(data),
         "--base-port", str(base_port)], stdout=subprocess.PIPE, text=True,
        start_new_session=True)
    assert local.stdout is not None
    nodes = [json.loads(local.stdout.readline()) for _ in range(3)]
    boot = [n["endpoint"] for n in nodes]
    voters = ",".join(f"{n['node_id']}@{n['endpoint']}" for n in nodes)
    extra = [_observer(data, 3 + i, base_port + 10 + i, voters) for i in range(2)]
    security = local_security(str(data))
    admin = QuorumClient(boot, retry_budget_s=30.0, **security.client_kwargs())
    load = _Appender(boot, security)
    load.start()
    windows: list[tuple[float, float]] = []
    warm = killed_at = float("inf")
    adds: list[float] = []
    removes: list[float] = []
    try:
        while len(load.samples) < 200:
            time.sleep(0.05)
        warm = time.monotonic()  # the first appends waited for the first election

        def change(what: str, call: Any) -> float:
            while True:
                start = time.monotonic()
                try:
                    call()
                except ClientError as exc:
                    if "REQUEST_TIMED_OUT" not in str(exc):  # not caught up yet: retry
                        raise
                    time.sleep(0.2)
                    continue
                end = time.monotonic()
                windows.append((start, end))
                say(f"  {what}: {1000 * (end - start):.1f} ms")
                time.sleep(0.5)  # appends between changes: the baseline
                return end - start

        for r in range(rounds):
            say(f"round {r + 1}/{rounds}: grow 3 -> 5, shrink 5 -> 3")
            for i, (_, endpoint, directory) in enumerate(extra):
                adds.append(change(f"add voter {3 + i}", lambda i=i, e=endpoint, d=directory:
                                   admin.add_voter(3 + i, d, (e,))))
            for i, (_, _, directory) in enumerate(extra):
                removes.append(change(f"remove voter {3 + i}", lambda i=i, d=directory:
                                      admin.remove_voter(3 + i, d)))
        for i, (_, endpoint, directory) in enumerate(extra):
            change(f"add voter {3 + i}", lambda i=i, e=endpoint, d=directory:
                   admin.add_voter(3 + i, d, (e,)))
        info = admin.describe_quorum()
        say(f"failover with voters {sorted(v.replica_id for v in info.voters)}: kill -9 the "
            f"leader {info.leader_id}")
        pids = {int(n["node_id"]): int(n["pid"]) for n in nodes}
        pids.update({3 + i: p.pid for i, (p, _, _) in enumerate(extra)})
        killed_at = time.monotonic()
        os.kill(pids[info.leader_id], signal.SIGKILL)
        deadline = killed_at + 30

        def new_epoch() -> list[float]:  # acks from the next leader (in-flight ones excluded)
            return [a for a, e in load.acks[-50:] if a > killed_at and e > info.leader_epoch]

        while time.monotonic() < deadline and not new_epoch():
            time.sleep(0.002)
        after = new_epoch()
        failover_ms = 1000 * (after[0] - killed_at) if after else float("nan")
        say(f"  next acknowledged append {failover_ms:.0f} ms after the kill")
    finally:
        load.stop.set()
        load.join(40)
        load.client.close()
        admin.close()
        for proc, _, _ in extra:
            proc.terminate()
            proc.wait(10)
        local.send_signal(signal.SIGTERM)
        try:
            local.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(local.pid, signal.SIGKILL)
        local.stdout.close()

    def in_change(start: float) -> bool:
        return any(a <= start <= b for a, b in windows)

    steady = [(s, lat) for s, lat in load.samples if warm <= s < killed_at]
    during = [lat * 1000 for s, lat in steady if in_change(s)]
    outside = [lat * 1000 for s, lat in steady if not in_change(s)]
    return {
        "add_voter_ms": {"median": 1000 * statistics.median(adds), "max": 1000 * max(adds)},
        "remove_voter_ms": {"median": 1000 * statistics.median(removes),
                            "max": 1000 * max(removes)},
        "appends_during_change_ms": {"count": len(during), "p50": _pct(during, 0.5),
                                     "p99": _pct(during, 0.99), "max": max(during or [0.0])},
        "appends_otherwise_ms": {"count": len(outside), "p50": _pct(outside, 0.5),
                                 "p99": _pct(outside, 0.99), "max": max(outside or [0.0])},
        "failover_5_voters_ms": failover_ms,
        "append_errors": load.errors,
    }


def format_result(result: dict[str, Any]) -> str:
    add, rem = result["add_voter_ms"], result["remove_voter_ms"]
    dur, out = result["appends_during_change_ms"], result["appends_otherwise_ms"]
    return "\n".join([
        f"add a caught-up voter:     median {add['median']:.1f} ms, max {add['max']:.1f} ms",
        f"remove a voter:            median {rem['median']:.1f} ms, max {rem['max']:.1f} ms",
        f"appends during a change:   n={dur['count']} p50 {dur['p50']:.2f} ms, "
        f"p99 {dur['p99']:.2f} ms, max {dur['max']:.2f} ms",
        f"appends otherwise:         n={out['count']} p50 {out['p50']:.2f} ms, "
        f"p99 {out['p99']:.2f} ms, max {out['max']:.2f} ms",
        f"failover with 5 voters:    {result['failover_5_voters_ms']:.0f} ms to the next "
        f"acknowledged append (append errors: {result['append_errors']})",
    ])
