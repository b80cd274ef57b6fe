"""`kraft-spark local --http-port` with the nodes' own HTTP APIs: the printed address is the
append router, and a client that only knows it goes through a leader kill without losing or
doubling an append (its retries carry an Idempotency-Key)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import LocalQuorum

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def post(url: str, body: Any, headers: dict[str, str]) -> Any:
    request = urllib.request.Request(f"{url}/v1/records", json.dumps(body).encode(),
                                     {"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_appends_through_the_printed_address_survive_a_leader_kill(tmp_path: Path) -> None:
    quorum = LocalQuorum(tmp_path, http=True, node_http=True)
    quorum.start()
    try:
        url = quorum.http_url
        assert url not in quorum.http_urls  # the router, not a node's own API
        with urllib.request.urlopen(urllib.request.Request(
                f"{url}/v1/quorum", headers=quorum.auth), timeout=30) as response:
            before = json.loads(response.read())
        first = post(url, {"key": "once", "value": 1}, {**quorum.auth, "Idempotency-Key": "K1"})
        acked: dict[str, int] = {}
        errors: list[str] = []
        for i in range(200):
            key = f"k{i}"
            if i == 50:  # the leader dies between two appends, with no goodbye
                os.kill(quorum.pid(before["leaderId"]), signal.SIGKILL)
            deadline = time.monotonic() + 30
            while True:
                try:
                    acked[key] = post(url, {"key": key, "value": i},
                                      {**quorum.auth, "Idempotency-Key": key})["base_offset"]
                    break
                except (OSError, http.client.HTTPException) as exc:
                    if isinstance(exc, urllib.error.HTTPError):
                        exc.close()
                    errors.append(f"{key}: {exc}")
                    assert time.monotonic() < deadline, errors[-3:]
                    time.sleep(0.1)
        # The key's retry under the next leader returns the first result.
        assert post(url, {"key": "once", "value": 1},
                    {**quorum.auth, "Idempotency-Key": "K1"}) == first
        with quorum.client([e for i, e in enumerate(quorum.bootstrap)
                            if i != before["leaderId"]]) as client:
            assert client.describe_quorum().leader_epoch > before["leaderEpoch"]
            log = client.read(0, 1000)
        where: dict[str, list[int]] = {}
        for record in log:
            if record.key is not None:
                where.setdefault(record.key.decode(), []).append(record.offset)
        assert where["once"] == [first["base_offset"]]
        for key, offset in acked.items():  # each acknowledged append exactly once, where told
            assert where.get(key) == [offset], (key, offset, where.get(key), errors[-3:])
    finally:
        assert quorum.stop() == 0


def quorum_seen_by(url: str, auth: dict[str, str]) -> dict[str, Any]:
    with urllib.request.urlopen(urllib.request.Request(f"{url}/v1/quorum", headers=auth),
                                timeout=10) as response:
        return dict(json.loads(response.read()))


def handed_over(url: str, auth: dict[str, str]) -> float:
    with urllib.request.urlopen(urllib.request.Request(f"{url}/metrics", headers=auth),
                                timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("kraft_spark_http_handed_over_connections_total "):
                return float(line.split()[1])
    raise AssertionError("no kraft_spark_http_handed_over_connections_total in the node's "
                         "/metrics")


def test_a_connection_handed_to_a_deposed_leader_is_sent_back_to_the_router(
        tmp_path: Path) -> None:
    """On this host the router hands a connection opened by an append to the leader's process.
    Once that node no longer leads (frozen past an election here), its next answer on the
    connection is the append, forwarded, with ``Connection: close``; the client's next
    connection reaches the new leader through the router."""
    quorum = LocalQuorum(tmp_path, http=True, node_http=True)
    quorum.start()
    host, port = quorum.http_url.removeprefix("http://").rsplit(":", 1)
    headers = {**quorum.auth, "Content-Type": "application/json"}
    old = -1
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        old = quorum_seen_by(quorum.http_url, quorum.auth)["leaderId"]
        deadline = time.monotonic() + 30
        # Until the router has heard of the leader (it asks every 250 ms), appends are proxied.
        while handed_over(quorum.http_urls[old], quorum.auth) == 0:
            assert time.monotonic() < deadline, "no connection was handed to the leader"
            conn.close()
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.request("POST", "/v1/records", json.dumps({"key": "a", "value": 1}), headers)
            response = conn.getresponse()
            assert response.status == 200 and response.getheader("connection") is None
            response.read()
        os.kill(quorum.pid(old), signal.SIGSTOP)  # frozen: the others elect a new leader
        while quorum_seen_by(quorum.http_url, quorum.auth).get("leaderId") in (old, -1, None):
            assert time.monotonic() < deadline, "no new leader within 30 s"
            time.sleep(0.2)
        os.kill(quorum.pid(old), signal.SIGCONT)
        while quorum_seen_by(quorum.http_urls[old], quorum.auth).get("leaderId") == old:
            assert time.monotonic() < deadline, "the old leader never learnt it was deposed"
            time.sleep(0.2)
        conn.request("POST", "/v1/records", json.dumps({"key": "b", "value": 2}), headers)
        response = conn.getresponse()
        body = json.loads(response.read())
        assert response.status == 200, body  # forwarded by the old leader
        assert response.getheader("connection") == "close"
        after = post(quorum.http_url, {"key": "c", "value": 3}, quorum.auth)
        assert after["base_offset"] > body["base_offset"]
    finally:
        conn.close()
        if old >= 0:
            os.kill(quorum.pid(old), signal.SIGCONT)
        assert quorum.stop() == 0
