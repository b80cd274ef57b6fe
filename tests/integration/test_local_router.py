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
