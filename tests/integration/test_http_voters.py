"""KIP-853 over HTTP: ``POST /v1/quorum/voters`` and ``DELETE /v1/quorum/voters/{id}`` on the
sidecar of ``kraft-spark local``, with real nodes; misuse gets the mapped status and changes
nothing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kraft_spark.log.meta import read_meta_properties

from .harness import LocalQuorum, Observer, running
from .test_http import authed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def voters(api: Any, base: str) -> list[dict[str, Any]]:
    status, body, _ = api(f"{base}/v1/quorum")
    assert status == 200, body
    listed: list[dict[str, Any]] = body["currentVoters"]
    return listed


def test_add_and_remove_voters_over_http(tmp_path: Path) -> None:
    quorum = LocalQuorum(tmp_path / "data", http=True)
    with running(quorum):
        base = quorum.http_url
        api = authed(quorum.auth)
        observer = Observer(quorum, 3)
        try:
            meta = read_meta_properties(str(observer.log_dir))
            assert meta is not None
            body = {"id": 3, "directoryId": meta.directory_id,
                    "endpoints": [f"CONTROLLER://{observer.endpoint}"]}
            deadline = time.monotonic() + 30
            while True:  # 409 (REQUEST_TIMED_OUT) until the observer fetches and caught up
                status, answer, _ = api(f"{base}/v1/quorum/voters", "POST", body)
                if status == 200:
                    break
                assert status == 409 and "REQUEST_TIMED_OUT" in answer["error"], answer
                assert time.monotonic() < deadline, answer
                time.sleep(0.2)
            assert answer == {"change": "added", "voterId": 3, "directoryId": meta.directory_id}
            assert [v["id"] for v in voters(api, base)] == [0, 1, 2, 3]
            # Misuse: a duplicate (409), bad endpoint / directory (422), unknown voter (404).
            status, answer, _ = api(f"{base}/v1/quorum/voters", "POST", body)
            assert status == 409 and "DUPLICATE_VOTER" in answer["error"], answer
            # A listener the leader cannot reach never becomes a voter (its ApiVersions probe).
            gone = dict(body, id=7, endpoints=["CONTROLLER://127.0.0.1:9"])
            status, answer, _ = api(f"{base}/v1/quorum/voters", "POST", gone)
            assert status == 409 and "REQUEST_TIMED_OUT" in answer["error"], answer
            assert "127.0.0.1:9 did not answer ApiVersions" in answer["error"], answer
            bad = dict(body, id=7, endpoints=["nope"])
            assert api(f"{base}/v1/quorum/voters", "POST", bad)[0] == 422
            bad = dict(body, id=7, directoryId="short")
            assert api(f"{base}/v1/quorum/voters", "POST", bad)[0] == 422
            assert api(f"{base}/v1/quorum/voters/9", "DELETE")[0] == 404
            assert [v["id"] for v in voters(api, base)] == [0, 1, 2, 3]
            status, answer, _ = api(f"{base}/v1/quorum/voters/3", "DELETE")
            assert status == 200 and answer["change"] == "removed", answer
            assert [v["id"] for v in voters(api, base)] == [0, 1, 2]
        finally:
            observer.stop()
