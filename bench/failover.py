"""Failover under load for systems driven over HTTP (etcd): kill -9 the leader while clients
write through the surviving members, and time the first write acknowledged in a later term.

Writes still in flight from the old leader do not count: only an answer whose Raft term is
greater than the killed leader's term proves that a new leader commits. (kraft-spark's own
failover points are measured the same way with its native client, in :mod:`bench.native`.)
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

FAILOVER_TIMEOUT_S = 30.0
# Writers are many and give up on a request after WRITE_TIMEOUT_S: a put proposed while there
# is no leader waits for the server's own request timeout (7 s in etcd) and would hide the
# moment the new leader starts committing. With 8 staggered writers per member the moment is
# seen to within about WRITE_TIMEOUT_S / 8.
WRITERS_PER_MEMBER = 8
WRITE_TIMEOUT_S = 0.3


def failover_ms(kill: Callable[[], None], urls: list[str], path: str, body: bytes, *,
                term_of: Callable[[object], int], old_term: int) -> float:
    """Milliseconds from ``kill()`` to the first 2xx answer with ``term_of(answer) > old_term``,
    with ``WRITERS_PER_MEMBER`` sequential writers per URL in ``urls`` (each gives up on a
    request after ``WRITE_TIMEOUT_S`` and sends another)."""
    acks: list[float] = []
    stop = threading.Event()

    def writer(url: str, n: int) -> None:
        parts = urlsplit(url)
        host = parts.hostname or "127.0.0.1"
        time.sleep(n * WRITE_TIMEOUT_S / WRITERS_PER_MEMBER)
        conn = http.client.HTTPConnection(host, parts.port, timeout=WRITE_TIMEOUT_S)
        while not stop.is_set():
            try:
                conn.request("POST", path, body=body,
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                raw = resp.read()
                if resp.status == 200 and term_of(json.loads(raw)) > old_term:
                    acks.append(time.monotonic())
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                conn.close()
                conn = http.client.HTTPConnection(host, parts.port, timeout=WRITE_TIMEOUT_S)
                time.sleep(0.005)
        conn.close()

    threads = [threading.Thread(target=writer, args=(u, n), daemon=True)
               for u in urls for n in range(WRITERS_PER_MEMBER)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    hit = time.monotonic()
    kill()
    deadline = hit + FAILOVER_TIMEOUT_S
    while not any(a > hit for a in acks) and time.monotonic() < deadline:
        time.sleep(0.001)
    stop.set()
    for t in threads:
        t.join(15)
    after = [a for a in acks if a > hit]
    if not after:
        raise RuntimeError(f"no commit in a later term within {FAILOVER_TIMEOUT_S:.0f} s")
    return round((min(after) - hit) * 1000, 1)


def etcd_failover_ms(cluster: object) -> float:
    """kill -9 of the etcd leader under load → first put acknowledged in a later term."""
    from bench.systems import VALUE, EtcdCluster, _b64

    assert isinstance(cluster, EtcdCluster)
    leader = cluster.leader_index()
    if leader is None:
        raise RuntimeError("etcd has no leader before the failover")
    old_term = int(cluster.status(leader)["header"]["raft_term"])
    survivors = [u for i, u in enumerate(cluster.client_urls) if i != leader]
    body = json.dumps({"key": _b64("failover"), "value": _b64(VALUE)}).encode()

    def term_of(answer: object) -> int:
        assert isinstance(answer, dict)
        return int(answer["header"]["raft_term"])

    return failover_ms(lambda: os.kill(cluster.procs[leader].pid, signal.SIGKILL),
                       survivors, "/v3/kv/put", body, term_of=term_of, old_term=old_term)
