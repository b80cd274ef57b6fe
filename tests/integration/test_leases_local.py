"""Leases on `kraft-spark local` (real node processes, each with its lease expirer): a key
attached to a lease outlives a kill -9 of the leader while kept alive, and goes once its
holder stops; the next leader decides that, not the one that granted it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from kraft_spark.client.kv import KvClient, KvError
from tests.lincheck.nemesis import KvQuorum

from .harness import running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_a_lease_survives_a_leader_kill_while_kept_alive_then_expires(tmp_path: Path) -> None:
    quorum = KvQuorum(tmp_path / "data")
    with running(quorum):
        url = quorum.http_urls[1]
        with KvClient(url, token=quorum.token, timeout_s=5) as kv:
            deadline = time.monotonic() + 30
            while True:
                try:
                    lease = kv.grant_lease(2000)
                    break
                except (KvError, OSError):  # no leader yet
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            kv.put("svc/worker", "alive", lease_id=lease.lease_id)
            leader = int(kv._http.get("/v1/quorum").json()["leaderId"])
            os.kill(quorum.pid(leader), signal.SIGKILL)
            others = [u for i, u in enumerate(quorum.http_urls) if i != leader]
            end = time.monotonic() + 4  # past the TTL, keeping it alive through the election
            while time.monotonic() < end:
                for other in others:
                    try:
                        with KvClient(other, token=quorum.token, timeout_s=2) as client:
                            client.keep_alive(lease.lease_id)
                        break
                    except (KvError, OSError):
                        continue
                time.sleep(0.3)
            with KvClient(others[0], token=quorum.token, timeout_s=5) as client:
                assert client.get("svc/worker") is not None
                deadline = time.monotonic() + 15  # no more keep-alives: the new leader expires
                while client.get("svc/worker") is not None:
                    assert time.monotonic() < deadline, "the lease never expired"
                    time.sleep(0.2)
                assert all(x.lease_id != lease.lease_id for x in client.leases())
        quorum.restart_node(leader)  # `local` stops cleanly with every node up
