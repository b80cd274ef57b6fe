"""The HTTP sidecar in front of a real local quorum (``kraft-spark local --http-port``)."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .harness import LocalQuorum, running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def call(url: str, method: str = "GET", body: Any = None, raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
            status, hdrs = response.status, dict(response.headers)
    except urllib.error.HTTPError as err:
        text, status, hdrs = err.read().decode(), err.code, dict(err.headers)
    try:
        return status, json.loads(text), hdrs
    except json.JSONDecodeError:
        return status, text, hdrs


def authed(auth: dict[str, str]) -> Any:
    """:func:`call` with ``auth`` (the quorum's Authorization header) on every request."""
    def api(url: str, method: str = "GET", body: Any = None, raw: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
        return call(url, method, body, raw, {**auth, **(headers or {})})
    return api


def _declare_oversized_body(base: str, size: int, auth: dict[str, str]) -> int:
    """POST headers announcing ``size`` bytes and wait for the answer before sending any: the
    sidecar refuses on Content-Length alone. (Sending the body first races the early 413:
    the server closes while the client still writes, and the client sees a broken pipe.)"""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest("POST", "/v1/records")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(size))
        for name, value in auth.items():
            conn.putheader(name, value)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def test_http_append_read_describe(tmp_path: Path) -> None:
    with running(LocalQuorum(tmp_path, http=True)) as quorum:
        base = quorum.http_url
        api = authed(quorum.auth)
        status, one, _ = api(f"{base}/v1/records", "POST", {"key": "a", "value": {"n": 1}})
        assert status == 200, one
        status, many, _ = api(f"{base}/v1/records", "POST", {"records": [
            {"key": "b", "value": "text", "headers": {"h": "v"}},
            {"key": "a", "value": None},
        ]})
        assert status == 200, many
        assert many["last_offset"] == many["base_offset"] + 1 > one["last_offset"]
        # Idempotency: the same key twice appends once.
        first = api(f"{base}/v1/records", "POST", {"key": "c", "value": 3},
                     headers={"Idempotency-Key": "k-1"})
        again = api(f"{base}/v1/records", "POST", {"key": "c", "value": 3},
                     headers={"Idempotency-Key": "k-1"})
        assert first[0] == again[0] == 200 and first[1] == again[1]
        # Bad input appends nothing.
        assert api(f"{base}/v1/records", "POST", raw=b"{not json")[0] == 400
        assert api(f"{base}/v1/records", "POST", {"key": 5, "value": 1})[0] == 422
        assert api(f"{base}/v1/records", "POST", {"key": "x", "value": 1, "extra": 1})[0] == 422
        assert _declare_oversized_body(base, 2_000_000, quorum.auth) == 413

        status, page, _ = api(f"{base}/v1/records?from_offset=0&limit=100")
        assert status == 200
        rows = [(r["key"], r["value"]) for r in page["records"]]
        assert rows == [("a", {"n": 1}), ("b", "text"), ("a", None), ("c", 3)]
        assert page["records"][1]["headers"] == {"h": "v"}
        assert page["records"][0]["offset"] == one["base_offset"]

        status, quorum_json, _ = api(f"{base}/v1/quorum")
        assert status == 200 and quorum_json["leaderId"] in (0, 1, 2)
        assert [v["id"] for v in quorum_json["currentVoters"]] == [0, 1, 2]
        status, replication, _ = api(f"{base}/v1/quorum/replication")
        assert status == 200 and replication[0]["status"] == "Leader"
        assert api(f"{base}/readyz")[0] == 200
        assert api(f"{base}/healthz")[0] == 200
        status, metrics, _ = api(f"{base}/metrics")
        assert status == 200 and "kraft_spark_http_request_latency_ms" in metrics
