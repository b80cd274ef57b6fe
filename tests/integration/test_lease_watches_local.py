"""Service discovery the usual way, on `kraft-spark local` (real node processes): several keys
on one lease and a prefix watch on every node. Revoking the lease, or letting it expire,
deletes every key, and every watcher of every node receives each delete, in order, with an id
that resumes between the deletes of one offset; the revocation itself answers at once."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from kraft_spark.client.kv import KvClient, KvError
from tests.lincheck.nemesis import KvQuorum

from .harness import running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DONE_KEY = "svc/~done"


class SseWatch(threading.Thread):
    """A prefix watch on one node, read as a user's EventSource would: every event's type, id
    and data, until the put of ``DONE_KEY``."""

    def __init__(self, url: str, token: str | None, *, last_event_id: str | None = None
                 ) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        if last_event_id is not None:
            self.headers["Last-Event-ID"] = last_event_id
        self.events: list[tuple[str, str | None, dict[str, Any]]] = []
        self.opened = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream("GET", f"{self.url}/v1/watch", params={"prefix": "svc/"},
                              headers=self.headers, timeout=httpx.Timeout(5, read=60)) as r:
                assert r.status_code == 200, r.read()
                fields: dict[str, str] = {}
                for line in r.iter_lines():
                    if line:
                        name, _, value = line.partition(":")
                        fields[name] = value.removeprefix(" ")
                        continue
                    kind, data = fields.get("event", ""), json.loads(fields.get("data", "{}"))
                    event_id, fields = fields.get("id"), {}
                    if kind == "progress":
                        self.opened.set()
                    if kind in ("put", "delete"):
                        self.events.append((kind, event_id, data))
                        if data["key"] == DONE_KEY:
                            return
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.opened.set()

    def writes(self) -> list[tuple[str, str]]:
        return [(kind, data["key"]) for kind, _, data in self.events]


def connect(url: str, token: str | None) -> KvClient:
    kv = KvClient(url, token=token, timeout_s=5)
    deadline = time.monotonic() + 30
    while True:  # until the quorum has a leader
        try:
            kv.get("svc/none")
            return kv
        except (KvError, OSError):
            assert time.monotonic() < deadline, "no leader within 30 s"
            time.sleep(0.2)


def test_a_leases_keys_reach_every_nodes_watchers_when_revoked_and_expired(
        tmp_path: Path) -> None:
    quorum = KvQuorum(tmp_path / "data")
    with running(quorum):
        kv = connect(quorum.http_urls[0], quorum.token)
        watches = [SseWatch(url, quorum.token) for url in quorum.http_urls]
        for watch in watches:
            watch.start()
            assert watch.opened.wait(20) and watch.error is None, watch.error

        revoked = kv.grant_lease(30_000)
        for name in ("a", "b", "c"):
            kv.put(f"svc/{name}", {"host": name}, lease_id=revoked.lease_id)
        kv.put("svc/static", 1)
        kv.revoke_lease(revoked.lease_id)  # answers (it waited on the apply: 504 before)
        assert [x.key for x in kv.range("svc/")] == ["svc/static"]

        expiring = kv.grant_lease(1000)
        kv.put("svc/d", 1, lease_id=expiring.lease_id)
        kv.put("svc/e", 1, lease_id=expiring.lease_id)
        deadline = time.monotonic() + 20  # no keep-alives: the leader expires it
        while kv.get("svc/e") is not None or kv.get("svc/d") is not None:
            assert time.monotonic() < deadline, "the lease never expired"
            time.sleep(0.1)
        kv.put(DONE_KEY, 1)

        expected = [("put", "svc/a"), ("put", "svc/b"), ("put", "svc/c"),
                    ("put", "svc/static"), ("delete", "svc/a"), ("delete", "svc/b"),
                    ("delete", "svc/c"), ("put", "svc/d"), ("put", "svc/e"),
                    ("delete", "svc/d"), ("delete", "svc/e"), ("put", DONE_KEY)]
        for watch in watches:
            watch.join(30)
            assert watch.error is None, f"{watch.url}: {watch.error!r}"
            assert watch.writes() == expected, watch.url
        # The same ids on every node: one offset for a lease's deletes, numbered within it.
        first = watches[0].events
        assert all(w.events == first for w in watches[1:])
        revoke_offset = first[4][2]["offset"]
        assert {e[2]["offset"] for e in first[4:7]} == {revoke_offset}
        assert [e[1] for e in first[4:7]] == [f"{revoke_offset}.0", f"{revoke_offset}.1",
                                              str(revoke_offset)]

        # A consumer that stopped after the first delete resumes with the rest of the offset.
        resumed = SseWatch(quorum.http_urls[2], quorum.token, last_event_id=first[4][1])
        resumed.start()
        resumed.join(30)
        assert resumed.error is None, resumed.error
        assert resumed.events == first[5:]
        # The Python client resumes there too, by the event's id.
        seen = []
        for event in kv.watch(prefix="svc/", after=first[4][1]):
            if event.type in ("put", "delete"):
                seen.append((event.type, event.id, event.key))
                if event.key == DONE_KEY:
                    break
        assert seen == [(kind, eid, data["key"]) for kind, eid, data in first[5:]]
        kv.close()
