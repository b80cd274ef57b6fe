"""The Spark application's fastest path (issue 27): every voter serves the HTTP API itself,
``GET /v1/quorum`` on the driver's endpoint names them, clients append to the leader directly
with the bearer token, and an ``Idempotency-Key`` retried under the next leader (after the
leader's voter process is killed and the barrier stage relaunched) appends nothing twice.
etcdctl works at the etcd address printed beside the HTTP one, before and after the relaunch."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import consecutive_free_ports, free_ports
from tests.integration.test_lease_watches_local import DONE_KEY, SseWatch
from tests.spark.test_application import App, _voter_hellos

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

TOKEN = "app-http-secret"
ETCDCTL = shutil.which("etcdctl") is not None  # Debian's etcd-client (`make test` installs it)
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def call(url: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data, {"Content-Type": "application/json", **(headers or {})},
        method="GET" if body is None else "POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def check_the_store_through_the_application(url: str) -> None:
    """Reads by key, a conditional write and a lease through the driver's endpoint, whose
    store is the driver's observer (driver/observer_store.py)."""
    create = {"records": [{"key": "cfg", "value": 1}],
              "conditions": [{"key": "cfg", "exists": False}]}
    created = call(f"{url}/v1/records", create, AUTH)
    got = call(f"{url}/v1/kv/cfg", headers=AUTH)  # linearizable: the observer's read index
    assert (got["value"], got["version"], got["mod_offset"]) == (1, 1, created["base_offset"])
    with pytest.raises(urllib.error.HTTPError) as conflict:
        call(f"{url}/v1/records", create, AUTH)
    assert conflict.value.code == 409
    conflict.value.close()
    lease = call(f"{url}/v1/leases", {"ttl_ms": 1000}, AUTH)
    call(f"{url}/v1/records", {"records": [{"key": "svc", "value": "up"}],
                               "lease_id": lease["lease_id"]}, AUTH)
    assert call(f"{url}/v1/kv/svc?consistency=serializable", headers=AUTH)["value"] == "up"
    deadline = time.monotonic() + 20  # no keep-alive: the leading voter expires it
    while True:
        try:
            call(f"{url}/v1/kv/svc", headers=AUTH)
        except urllib.error.HTTPError as gone:
            gone.close()
            assert gone.code == 404
            break
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.2)
    check_a_leases_keys_reach_a_watch_through_the_application(url)


def check_a_leases_keys_reach_a_watch_through_the_application(url: str) -> None:
    """Service discovery as users write it, at the address the application prints: three keys
    on one lease and a prefix watch. The revocation answers (504 before: the failed publish
    stalled the waiters behind it) and the watch gets every delete, then the next put."""
    watch = SseWatch(url, TOKEN)
    watch.start()
    assert watch.opened.wait(30) and watch.error is None, watch.error
    lease = call(f"{url}/v1/leases", {"ttl_ms": 30_000}, AUTH)
    call(f"{url}/v1/records", {"records": [{"key": f"svc/{k}", "value": k} for k in "abc"],
                               "lease_id": lease["lease_id"]}, AUTH)
    revoke = urllib.request.Request(f"{url}/v1/leases/{lease['lease_id']}", headers=AUTH,
                                    method="DELETE")
    with urllib.request.urlopen(revoke, timeout=30) as response:
        assert response.status in (200, 204)
    call(f"{url}/v1/records", {"key": DONE_KEY, "value": 1}, AUTH)
    watch.join(30)
    assert watch.error is None, watch.error
    assert watch.writes() == [("put", "svc/a"), ("put", "svc/b"), ("put", "svc/c"),
                              ("delete", "svc/a"), ("delete", "svc/b"), ("delete", "svc/c"),
                              ("put", DONE_KEY)]


def etcdctl(app: App, *args: str) -> str:
    """Debian's etcdctl at the etcd address the application printed beside its HTTP one, as
    the one credential of ``kraft.http.token`` (an etcd user named ``token``)."""
    done = subprocess.run(["etcdctl", f"--endpoints={app.info['etcd']}", "--user",
                           f"token:{TOKEN}", "--command-timeout=20s", *args],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "ETCDCTL_API": "3"})
    assert done.returncode == 0, f"etcdctl {' '.join(args)}: {done.stderr}"
    return done.stdout


def check_etcd_through_the_application(app: App, key: str) -> None:
    """etcd's API at the application's etcd address (driver/etcd_endpoint.py): a put and a
    get through the front, which forwards them to a voter's own etcd listener; the same key
    over the HTTP API."""
    assert sorted(app.info["voter_etcd"]) == ["0", "1", "2"]
    assert etcdctl(app, "put", key, "v") == "OK\n"
    assert etcdctl(app, "get", key) == f"{key}\nv\n"
    assert call(f"{app.url}/v1/kv/{key}", headers=AUTH)["value"] == "v"


def test_clients_append_to_the_leaders_own_http_api_across_a_leader_change(
    tmp_path: Path, spark: Any
) -> None:
    http_base = consecutive_free_ports(3)
    app = App(tmp_path, free_ports(1)[0], consecutive_free_ports(3),
              props=f"kraft.http.token={TOKEN}\nkraft.voter.http.base.port={http_base}\n")
    acked: dict[str, int] = {}
    errors: list[str] = []
    stop = threading.Event()
    leader_url = [""]

    def leader() -> str:
        if not leader_url[0]:
            leader_url[0] = call(f"{app.url}/v1/quorum", headers=AUTH)["leaderHttpUrl"] or ""
        return leader_url[0]

    def load(client: int, through_app: bool) -> None:
        """A client that goes to the leader directly and, on any failure, asks the driver's
        endpoint where the leader is now and retries under the same key; or one that only
        knows the address users are given (``through_app``), retrying there."""
        i = 0
        while not stop.is_set():
            key = f"c{client}-{i}"
            while not stop.is_set():
                try:
                    url = app.url if through_app else leader()
                    acked[key] = call(f"{url}/v1/records", {"key": key, "value": i},
                                      {**AUTH, "Idempotency-Key": key})["base_offset"]
                    break
                # Refused, 503/504, a dropped connection, or a response cut short (the leader
                # was killed between writing the head and the body: IncompleteRead).
                except (OSError, ValueError, http.client.HTTPException) as exc:
                    errors.append(f"{key}: {exc}")
                    leader_url[0] = ""
                    time.sleep(0.2)
            i += 1

    # Clients 0 and 1 go to the leader's own API; client 2 to the application's address,
    # whose router sends appends to the leader's API too (kraft_spark/proxy/front.py).
    loaders = [threading.Thread(target=load, args=(c, c == 2), daemon=True) for c in range(3)]
    try:
        before = call(f"{app.url}/v1/quorum", headers=AUTH)
        assert before["httpUrls"] == {str(i): f"http://127.0.0.1:{http_base + i}"
                                      for i in range(3)}
        assert before["leaderHttpUrl"] == before["httpUrls"][str(before["leaderId"])]
        assert app.info["voter_http"] == {str(i): before["httpUrls"][str(i)] for i in range(3)}
        # The token applies on the voters' own APIs as on the driver's.
        with pytest.raises(urllib.error.HTTPError) as refused:
            call(f"{before['leaderHttpUrl']}/v1/records", {"key": "x", "value": 0})
        assert refused.value.code == 401
        refused.value.close()
        once = {"key": "once", "value": 1}
        first = call(f"{before['leaderHttpUrl']}/v1/records", once,
                     {**AUTH, "Idempotency-Key": "K1"})
        check_the_store_through_the_application(app.url)
        if ETCDCTL:
            check_etcd_through_the_application(app, "etcd/before")

        for t in loaders:
            t.start()
        deadline = time.monotonic() + 60
        while len(acked) < 40:
            assert time.monotonic() < deadline, f"no steady load: {errors[-3:]}"
            time.sleep(0.1)
        victim = int(_voter_hellos(tmp_path / "app.log")[before["leaderId"]]["pid"])
        os.kill(victim, signal.SIGKILL)  # the leader's voter process: the stage relaunches
        deadline = time.monotonic() + 240
        while not all(int(h["generation"]) >= 1
                      for h in _voter_hellos(tmp_path / "app.log").values()):
            assert time.monotonic() < deadline, "the voters were not relaunched"
            time.sleep(0.2)
        count = len(acked)
        while len(acked) < count + 40:
            assert time.monotonic() < deadline, f"no commits after relaunch: {errors[-3:]}"
            time.sleep(0.1)
        after = call(f"{app.url}/v1/quorum", headers=AUTH)
        assert after["leaderEpoch"] > before["leaderEpoch"]
        # The key's retry under the next leader: the first append's offsets, nothing appended.
        again = call(f"{after['leaderHttpUrl']}/v1/records", once,
                     {**AUTH, "Idempotency-Key": "K1"})
        assert again == first
        # And through the address users are given, which routes it to the new leader.
        assert call(f"{app.url}/v1/records", once, {**AUTH, "Idempotency-Key": "K1"}) == first
        assert sum(1 for key in acked if key.startswith("c2-")) >= 20, "client 2 stalled"
        if ETCDCTL:  # the relaunched voters' etcd listeners, on new free ports
            check_etcd_through_the_application(app, "etcd/after")
    finally:
        stop.set()
        for t in loaders:
            if t.ident is not None:  # started
                t.join(60)
        code = app.stop()
    assert code == 0
    assert errors, "the leader change was not seen by the clients"
    rows = spark.read.format("delta").load(f"{app.info['warehouse']}/records").collect()
    where: dict[str, list[int]] = {}
    for r in rows:
        where.setdefault(r["key"], []).append(r["offset"])
    assert where["once"] == [first["base_offset"]]
    for key, offset in acked.items():  # each acknowledged append exactly once, where told
        assert where.get(key) == [offset], f"{key} acked at {offset}, Delta has {where.get(key)}"
