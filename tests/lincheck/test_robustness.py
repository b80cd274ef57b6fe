"""Linearizability under faults, on real processes (in the manner of etcd's robustness tests):
``kraft-spark local`` with three voters, each serving the HTTP API; four clients run get / put
/ cas / delete on a few keys through the nodes for ~20 s while a nemesis kills (kill -9, then a
restart) or freezes (SIGSTOP / SIGCONT) one node at a time, the leader about half the time. The
recorded history is then checked with porcupine (``checker.py``): a violation fails the test
with the checker's summary and the path of its visualization (beside the history as checked,
``history.json``, and as recorded, ``history-raw.json``). Writes left without an answer are
settled first with the log as it stands once every op has completed (``resolve_unknown``).

``LINCHECK_SEED`` replays the same choices (keys, kinds, targets; not the timing)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from kraft_spark.lincheck.checker import History, check_history, go_available, resolve_unknown

from .nemesis import (
    KvClient,
    KvQuorum,
    Lost,
    Nemesis,
    NodeConnection,
    NotSent,
    Workload,
    log_tails,
    read_log,
    wait_ready,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

CLIENTS = 4
KEYS = ["k0", "k1", "k2", "k3"]
RUN_S = 20.0
CHECK_TIMEOUT_S = 90.0


def final_reads(quorum: KvQuorum, history: History, client: int) -> tuple[int, int]:
    """Once the faults are over: every key read through every node (each retried while the
    node answers 503), into the history. Returns how many were answered, and the highest
    offset an answer reflected."""
    answered = offset = 0
    for url in quorum.http_urls:
        conn = NodeConnection(url, token=quorum.token)
        for key in KEYS:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                handle = history.invoke(client, "get", key)
                try:
                    status, body = conn.call("GET", f"/v1/kv/{key}")
                except (NotSent, Lost):
                    status, body = 0, None
                if status == 200 and isinstance(body, dict):
                    value = body["value"]
                    history.ok(handle, present=True, version=int(body["version"]),
                               value=value if isinstance(value, str) else json.dumps(value))
                elif status == 404 and isinstance(body, dict) and "offset" in body:
                    history.ok(handle, present=False)
                else:
                    history.fail(handle)
                    time.sleep(0.2)
                    continue
                answered += 1
                offset = max(offset, int(body["offset"]))
                break
        conn.close()
    return answered, offset


def describe(history: History, nemesis: Nemesis | None) -> str:
    lines = [f"ops by kind: {history.counts()}"]
    if nemesis is not None:
        lines.append(f"nemesis: {nemesis.kills} kills, {nemesis.pauses} pauses "
                     f"({nemesis.leader_faults} of the leader)")
        lines.extend(nemesis.events)
    return "\n".join(lines)


def test_kv_is_linearizable_under_kills_and_pauses(tmp_path: Path) -> None:
    reason = go_available()  # before any process starts: the first build can take a while
    if reason is not None:
        pytest.skip(reason)
    seed = int(os.environ.get("LINCHECK_SEED", str(time.time_ns() % 1_000_000)))
    print(f"\nLINCHECK_SEED={seed}")
    data_dir = tmp_path / "data"
    quorum = KvQuorum(data_dir)
    workload = Workload(quorum, KEYS, CLIENTS)
    history, stop = workload.history, workload.stop
    nemesis: Nemesis | None = None
    clients: list[KvClient] = []
    try:
        quorum.start()
        wait_ready(quorum)
        clients = [KvClient(i, workload, seed + i) for i in range(CLIENTS)]
        nemesis = Nemesis(quorum, seed)
        for client in clients:
            client.start()
        nemesis.start()
        stop.wait(RUN_S)
        nemesis.finish()
        stop.set()
        for client in clients:
            client.join(2 * 2.5 + 5)
        assert not any(c.is_alive() for c in clients), "a client did not stop"
        assert nemesis.error is None, f"the nemesis failed: {nemesis.error!r}"
        wait_ready(quorum)
        answered, end = final_reads(quorum, history, client=10 * CLIENTS)
        assert answered == len(KEYS) * len(quorum.http_urls), (
            f"only {answered} final reads were answered")
        # Every op has completed: what the log holds now settles the unanswered writes.
        logged = read_log(quorum, end)

        print(describe(history, nemesis))
        unexpected = "\n".join(workload.unexpected.items)
        ops = history.ops()
        (tmp_path / "lincheck").mkdir()
        (tmp_path / "lincheck" / "history-raw.json").write_text(json.dumps({"ops": ops}))
        if logged is not None:
            ops, settled = resolve_unknown(ops, logged)
            print(f"unanswered writes settled with the log: {settled}")
        else:
            print("the log could not be read from offset 0: unanswered writes stay unknown")

        result = check_history(ops, timeout_s=CHECK_TIMEOUT_S, out_dir=tmp_path / "lincheck")
        print(result.summary)
        if not result.ok:
            where = (f"visualization: {result.visualization}" if result.visualization
                     else "no visualization")
            pytest.fail(f"{result.summary}\n{where}\nhistory: {tmp_path / 'lincheck'}"
                        f"/history.json\n{describe(history, nemesis)}\n"
                        f"unexpected answers: {unexpected or 'none'}")
        assert not unexpected, f"unexpected answers:\n{unexpected}"
        # Not vacuous: faults happened, and every kind of op succeeded often enough.
        assert nemesis.kills >= 1 and nemesis.pauses >= 1, describe(history, nemesis)
        counts = history.counts()
        assert counts["get"]["succeeded"] >= 100, counts
        assert counts["put"]["succeeded"] >= 30, counts
        assert counts["cas"]["succeeded"] >= 20, counts
        assert counts["cas"]["failed"] >= 5, counts
        assert counts["delete"]["succeeded"] >= 10, counts
        present = sum(1 for op in ops if op["kind"] == "get" and op["present"])
        absent = sum(1 for op in ops if op["kind"] == "get" and op["present"] is False)
        assert present >= 20 and absent >= 5, (present, absent)
    except BaseException:
        print(log_tails(data_dir))
        raise
    finally:
        stop.set()
        if nemesis is not None:
            nemesis.finish()
        for client in clients:
            client.join(10)
        quorum.stop()
