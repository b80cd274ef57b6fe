"""etcd's own Go client (go.etcd.io/etcd/client/v3, ``tests/etcd/goclient``) against a real
``kraft-spark local`` of three voters while a nemesis kills -9 and SIGSTOPs the leader: the
put / get / compare-and-set / delete history is checked with porcupine
(``kraft_spark.lincheck``), and the program checks its ``concurrency.NewMutex`` (holders never
overlap, the counter they increment is exact), ``concurrency.NewElection`` (observers see the
leaders in one order, proclaiming leaders never overlap) and ``concurrency.NewSTM`` (transfers
conserve the total) workloads itself.

The program is built once per version of its sources into the pytest cache; the tests are
skipped, saying why, without Go or the Go module proxy. ``GOCLIENT_SEED`` replays the same
choices (not the timing)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kraft_spark.http_auth import CREDENTIALS_FILE, Credentials, Scope
from kraft_spark.lincheck.checker import CheckResult, check_history, go_available, resolve_unknown
from tests.etcd.goclient_build import build
from tests.lincheck.nemesis import (
    KvQuorum,
    Lost,
    Nemesis,
    NodeConnection,
    NotSent,
    log_tails,
    read_log,
    wait_ready,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

RUN_S = 16.0  # the workloads' duration; the faults end 2 s before
CHECK_TIMEOUT_S = 60.0


class LeaderNemesis(Nemesis):
    """The nemesis's faults (a kill -9 and restart, then a SIGSTOP, in turn), always on the
    leader; ``windows`` holds each fault's (kind, start, end) in ``time.monotonic_ns()``, the
    Go program's clock (CLOCK_MONOTONIC)."""

    def __init__(self, quorum: KvQuorum, seed: int) -> None:
        super().__init__(quorum, seed, calm_s=1.0, pause_s=(1.5, 2.5))
        self.windows: list[tuple[str, int, int]] = []

    def pick(self, leader: int | None) -> tuple[int, str] | None:
        return None if leader is None else (leader, "the leader")

    def strike(self, target: int, role: str) -> None:
        kind = "kill" if (self.kills + self.pauses) % 2 == 0 else "pause"
        start = time.monotonic_ns()
        super().strike(target, role)
        self.windows.append((kind, start, time.monotonic_ns()))


@dataclass
class GoRun:
    summary: dict[str, Any]
    ops: list[dict[str, Any]]  # as recorded
    lincheck: CheckResult
    settled: dict[str, int]
    nemesis: LeaderNemesis
    seconds: float
    events: list[str] = field(default_factory=list)


def _counts(ops: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out = {k: {"ok": 0, "failed": 0, "unknown": 0} for k in ("get", "put", "cas", "delete")}
    for op in ops:
        if op["return_ns"] is None:
            out[op["kind"]]["unknown"] += 1
        elif op["kind"] == "cas" and not op["ok"]:
            out["cas"]["failed"] += 1
        else:
            out[op["kind"]]["ok"] += 1
    return out


def _spanning(ops: list[dict[str, Any]], start_ns: int) -> int:
    """How many ops were under way when a fault began."""
    return sum(1 for op in ops if op["call_ns"] < start_ns
               and (op["return_ns"] is None or op["return_ns"] > start_ns))


def _log_end(quorum: KvQuorum) -> int:
    """The offset some node's answer reflects once every op has completed."""
    for _ in range(50):
        for url in quorum.http_urls:
            conn = NodeConnection(url, token=quorum.token)
            try:
                status, body = conn.call("GET", "/v1/kv/kv/k0")
            except (NotSent, Lost):
                continue
            finally:
                conn.close()
            if status in (200, 404) and isinstance(body, dict) and "offset" in body:
                return int(body["offset"])
        time.sleep(0.2)
    raise AssertionError("no node answered a read after the run")


def _run(binary: Path, tmp: Path, seed: int) -> GoRun:
    began = time.monotonic()
    quorum = KvQuorum(tmp / "data")
    nemesis = LeaderNemesis(quorum, seed)
    proc: subprocess.Popen[str] | None = None
    try:
        quorum.start()
        wait_ready(quorum)
        admin = next(c for c in Credentials.load(str(quorum.data_dir / CREDENTIALS_FILE)).entries
                     if c.scope == Scope.ADMIN)
        history = tmp / "history.jsonl"
        proc = subprocess.Popen(
            [str(binary), "-endpoints", ",".join(str(n["etcd"]) for n in quorum.nodes),
             "-user", f"{admin.name or admin.scope.label}:{admin.token}",
             "-duration", f"{RUN_S}s", "-timeout", "1s", "-history", str(history),
             "-seed", str(seed)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        nemesis.start()
        time.sleep(RUN_S - 2)
        nemesis.finish()
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, f"goclient exited {proc.returncode}: {err[-3000:]}"
        assert nemesis.error is None, f"the nemesis failed: {nemesis.error!r}"
        summary = json.loads(out)
        ops = [json.loads(line) for line in history.read_text().splitlines()]
        wait_ready(quorum)
        logged = read_log(quorum, _log_end(quorum))
        checked, settled = resolve_unknown(ops, logged) if logged is not None else (ops, {})
        result = check_history(checked, timeout_s=CHECK_TIMEOUT_S, out_dir=tmp / "lincheck")
        return GoRun(summary, ops, result, settled, nemesis, time.monotonic() - began,
                     list(nemesis.events))
    except BaseException:
        print(log_tails(tmp / "data"))
        raise
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        nemesis.finish()
        quorum.stop()


@pytest.fixture(scope="module")
def go_run(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[GoRun]:
    reason = go_available()  # porcupine, built before any process starts
    if reason is not None:
        pytest.skip(reason)
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    binary, reason = build(Path(cache.mkdir("goclient")) if cache is not None
                           else tmp_path_factory.mktemp("goclient"))
    if binary is None:
        pytest.skip(reason or "the Go client program cannot be built")
    seed = int(os.environ.get("GOCLIENT_SEED", str(time.time_ns() % 1_000_000)))
    print(f"\nGOCLIENT_SEED={seed}")
    run = _run(binary, tmp_path_factory.mktemp("goclient"), seed)
    summary = run.summary
    print(f"{run.seconds:.1f} s; kv ops {_counts(run.ops)}; settled {run.settled}; "
          f"{run.lincheck.summary}")
    print(f"mutex: {summary['mutex']['acked']} increments, {summary['mutex']['lost']} lost, "
          f"{summary['mutex']['unknown']} unknown; election: {len(summary['election']['wins'])} "
          f"terms won, observers saw {[len(o) for o in summary['election']['observed']]}; "
          f"stm: {summary['stm']}; errors: {summary['errors']}")
    print("\n".join(run.events))
    yield run


def test_go_client_under_leader_kills_and_pauses(go_run: GoRun) -> None:
    summary, nemesis = go_run.summary, go_run.nemesis
    assert go_run.lincheck.ok, (f"{go_run.lincheck.summary}\nvisualization: "
                                f"{go_run.lincheck.visualization}\n" + "\n".join(go_run.events))
    assert summary["mutex"]["violation"] == "", summary["mutex"]["violation"]
    assert summary["election"]["violation"] == "", summary["election"]["violation"]
    assert summary["stm"]["violation"] == "", summary["stm"]["violation"]
    # Not vacuous: faults of both kinds on the leader, with ops under way when they began,
    # and every workload got through often enough.
    assert nemesis.kills >= 1 and nemesis.pauses >= 1, go_run.events
    for kind in ("kill", "pause"):
        starts = [start for k, start, _ in nemesis.windows if k == kind]
        assert sum(_spanning(go_run.ops, s) for s in starts) >= 1, (kind, go_run.events)
    counts = _counts(go_run.ops)
    assert counts["get"]["ok"] >= 100 and counts["put"]["ok"] >= 30, counts
    assert counts["cas"]["ok"] >= 20 and counts["cas"]["failed"] >= 5, counts
    assert counts["delete"]["ok"] >= 5, counts
    assert summary["mutex"]["acked"] >= 10, summary["mutex"]
    assert sum(w["outcome"] == "ok" for w in summary["election"]["wins"]) >= 5
    assert all(len(seen) >= 3 for seen in summary["election"]["observed"])
    assert summary["stm"]["committed"] >= 10, summary["stm"]


def test_go_stm_reading_one_account_after_the_other_commits(go_run: GoRun) -> None:
    # Its second read is at the first one's revision: the node's MVCC history answers it
    # (kraft_spark/store/history.py); before the history it failed with ErrCompacted.
    stm = go_run.summary["stm"]
    assert stm["separate_failed"] * 10 <= stm["separate_committed"], stm
