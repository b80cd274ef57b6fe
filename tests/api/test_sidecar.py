"""The HTTP sidecar over real HTTP: uvicorn on 127.0.0.1 (port 0) in a thread, http.client.

These tests test the HTTP layer (validation, status codes, idempotency, auth, size limits,
lifecycle), so the quorum is replaced by :class:`InMemoryTestBackend`, a list acting as the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from api.app import create_app
from api.server import ServerHandle, serve_in_thread
from kraft_spark.client.errors import (
    CommitTimeoutError,
    NoLeaderError,
    RecordTooLargeError,
)
from kraft_spark.client.types import (
    AppendRecord,
    AppendResult,
    CommittedRecord,
    QuorumInfo,
    ReplicaInfo,
)
from kraft_spark.http_auth import Credential, Credentials, Scope
from kraft_spark.metrics import Registry
from kraft_spark.raft.records import Record
from tests.metrics_text import samples

pytestmark = [pytest.mark.timeout(60), pytest.mark.loop_free]

T = 1_700_000_000_000
JSON = {"Content-Type": "application/json"}


class InMemoryTestBackend:
    """A stand-in for ``AsyncQuorumClient`` for HTTP-layer tests: appends land in a list.

    ``fail_with`` makes appends raise; ``hold`` makes them wait until it is set (polling, so a
    cancelled append stops at once); ``entered`` is set when an append call starts.
    """

    def __init__(self) -> None:
        self.cluster_id: str | None = "test-cluster"
        self.epoch = 3
        self.log: list[CommittedRecord] = []
        self.appends: list[tuple[AppendRecord, ...]] = []  # every call that reached the backend
        self.keys: list[str | None] = []  # the Idempotency-Key each call carried
        self.timeouts: list[float] = []
        self.fail_with: Exception | None = None
        self.hold: threading.Event | None = None
        self.entered = threading.Event()
        self.quorum = QuorumInfo(
            cluster_id="test-cluster",
            leader_id=1,
            leader_epoch=3,
            high_watermark=10,
            voters=(
                ReplicaInfo(0, 8, T - 5, T - 20),
                ReplicaInfo(1, 10, T, T),
                ReplicaInfo(2, 10, T - 1, T - 1),
            ),
            observers=(ReplicaInfo(3000, 4, T - 2, -1),),
        )
        self.describe_error: Exception | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.close_loop: asyncio.AbstractEventLoop | None = None

    async def append(
        self, records: Sequence[AppendRecord], *, timeout_s: float = 10.0,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        self.keys.append(idempotency_key)
        self.appends.append(tuple(records))
        self.timeouts.append(timeout_s)
        self.entered.set()
        if self.hold is not None:
            deadline = time.monotonic() + 30
            while not self.hold.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        if self.fail_with is not None:
            raise self.fail_with
        base = len(self.log)
        for i, record in enumerate(records):
            self.log.append(
                CommittedRecord(
                    offset=base + i,
                    epoch=self.epoch,
                    timestamp_ms=T + base + i,
                    key=record.key,
                    value=record.value,
                    headers=record.headers,
                )
            )
        return AppendResult(base_offset=base, last_offset=len(self.log) - 1, epoch=self.epoch)

    async def read(self, from_offset: int, limit: int = 100) -> list[CommittedRecord]:
        return [r for r in self.log if r.offset >= from_offset][:limit]

    async def describe_quorum(self) -> QuorumInfo:
        if self.describe_error is not None:
            raise self.describe_error
        return self.quorum

    async def close(self) -> None:
        self.close_loop = asyncio.get_running_loop()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Client:
    port: int
    auth: dict[str, str] = field(default_factory=dict)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        try:
            # A 413 may come (and the server close) while the body is still going out: the
            # broken pipe is then expected, and the answer is read below.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                conn.request(method, path, body=body, headers={**self.auth, **(headers or {})})
            response = conn.getresponse()
            return Reply(
                response.status,
                {k.lower(): v for k, v in response.getheaders()},
                response.read(),
            )
        finally:
            conn.close()

    def post(self, payload: Any, headers: dict[str, str] | None = None) -> Reply:
        return self.post_raw(json.dumps(payload).encode(), headers)

    def post_raw(self, body: bytes, headers: dict[str, str] | None = None) -> Reply:
        return self.request("POST", "/v1/records", body, {**JSON, **(headers or {})})

    def get(self, path: str, headers: dict[str, str] | None = None) -> Reply:
        return self.request("GET", path, None, headers)


Serve = Callable[..., Client]


@pytest.fixture
def backend() -> InMemoryTestBackend:
    return InMemoryTestBackend()


# Every HTTP-layer test runs against both ways into POST /v1/records: the fast ASGI path (the
# default) and FastAPI's route; they must answer alike.
@pytest.fixture(params=[True, False], ids=["fast-append", "fastapi-append"])
def fast_append(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def serve(backend: InMemoryTestBackend, fast_append: bool) -> Iterator[Serve]:
    """Start the app (``create_app(backend, **kwargs)``) on a free port; stopped at teardown."""
    handles: list[ServerHandle] = []

    def start(**kwargs: Any) -> Client:
        if "backend_factory" not in kwargs:
            kwargs["backend"] = backend
        kwargs.setdefault("fast_append", fast_append)
        handle = serve_in_thread(create_app(**kwargs))
        handles.append(handle)
        return Client(handle.port)

    try:
        yield start
    finally:
        if backend.hold is not None:
            backend.hold.set()
        for handle in handles:
            handle.stop()


@pytest.fixture(scope="module", params=[True, False], ids=["fast-append", "fastapi-append"])
def shared(request: pytest.FixtureRequest) -> Iterator[tuple[Client, InMemoryTestBackend]]:
    """One server for the many bad-input cases (none of which may append anything)."""
    backend = InMemoryTestBackend()
    handle = serve_in_thread(create_app(backend, fast_append=bool(request.param)))
    try:
        yield Client(handle.port), backend
    finally:
        handle.stop()


def values(backend: InMemoryTestBackend) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for r in backend.log]


# --------------------------------------------------------------------------- appends


def test_single_append_converts_key_value_and_headers(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve()
    before = int(time.time() * 1000)
    reply = client.post({"key": "topic/é", "value": {"b": [1, 2.5, "x"], "a": None},
                         "headers": {"source": "test", "h": "ü"}})
    assert reply.status == 200, reply.body
    assert reply.json() == {"base_offset": 0, "last_offset": 0, "epoch": 3}
    [(record,)] = backend.appends
    # Built once, as the log holds it: stamped with the time the API took it.
    assert isinstance(record, Record)
    assert before <= record.timestamp_ms <= int(time.time() * 1000)
    assert record == Record(
        key="topic/é".encode(),
        value=b'{"b":[1,2.5,"x"],"a":null}',
        timestamp_ms=record.timestamp_ms,
        headers=(("source", b"test"), ("h", "ü".encode())),
    )
    assert "idempotent-replayed" not in reply.headers


def test_batch_lands_at_consecutive_offsets_in_request_order(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve()
    assert client.post({"key": "first", "value": 0}).json()["base_offset"] == 0
    reply = client.post(
        {"records": [{"key": "a", "value": 1}, {"key": "b", "value": "two"}, {"key": "c",
                                                                              "value": [3]}]}
    )
    assert reply.status == 200, reply.body
    assert reply.json() == {"base_offset": 1, "last_offset": 3, "epoch": 3}
    assert values(backend) == [
        (b"first", b"0"), (b"a", b"1"), (b"b", b'"two"'), (b"c", b"[3]")
    ]


def test_null_value_is_a_tombstone_and_reads_back_as_null(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve()
    assert client.post({"key": "k", "value": {"v": 1}}).status == 200
    assert client.post({"key": "k", "value": None}).status == 200
    assert values(backend) == [(b"k", b'{"v":1}'), (b"k", None)]
    records = client.get("/v1/records?from_offset=0").json()["records"]
    assert [r["value"] for r in records] == [{"v": 1}, None]


def test_read_returns_committed_records_and_next_offset(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve()
    client.post({"records": [{"key": f"k{i}", "value": i, "headers": {"n": str(i)}}
                             for i in range(5)]})
    backend.log.append(CommittedRecord(5, 3, T + 99, b"raw", b"not json {", (("h", None),)))
    reply = client.get("/v1/records?from_offset=1&limit=2")
    assert reply.status == 200
    assert reply.json() == {
        "records": [
            {"offset": 1, "epoch": 3, "timestamp": T + 1, "key": "k1", "value": 1,
             "headers": {"n": "1"}},
            {"offset": 2, "epoch": 3, "timestamp": T + 2, "key": "k2", "value": 2,
             "headers": {"n": "2"}},
        ],
        "next_offset": 3,
    }
    tail = client.get("/v1/records?from_offset=5").json()
    assert tail["records"][0]["value"] == "not json {"  # not JSON: returned as a string
    assert tail["records"][0]["headers"] == {"h": None}
    assert tail["next_offset"] == 6
    assert client.get("/v1/records?from_offset=100").json() == {
        "records": [], "next_offset": 100
    }
    assert client.get("/v1/records?limit=0").status == 422
    assert client.get("/v1/records?limit=1001").status == 422
    bad = client.get("/v1/records?from_offset=-1")
    assert bad.status == 422
    assert "from_offset" in bad.json()["error"]


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (b'{"key": "k", "value": ', 400, "not valid JSON"),
        (b"", 400, "empty"),
        (b'{"key": "k", "value": NaN}', 400, "not valid JSON"),
        (b'\xff\xfe{"key"', 400, "not valid JSON"),
        (b'["k", 1]', 422, "must be a JSON object"),
        (b'{"key": 5, "value": 1}', 422, "key"),
        (b'{"key": "", "value": 1}', 422, "key"),
        (b'{"value": 1}', 422, "key: required field is missing"),
        (b'{"key": "k"}', 422, "value: required field is missing"),
        (b'{"key": "k", "value": 1, "headers": {"h": 1}}', 422, "headers.h"),
        (b'{"key": "k", "value": 1, "headers": ["h"]}', 422, "headers"),
        (b'{"key": "k", "value": 1, "ttl": 5}', 422, "ttl: unknown field"),
        (b'{"records": []}', 422, "records"),
        (b'{"records": {"key": "k"}}', 422, "records"),
        (b'{"records": [{"key": "a", "value": 1}, {"key": "b", "value": 2, "x": 0}]}', 422,
         "records[1].x: unknown field"),
        (b'{"records": [{"key": "a", "value": 1}], "key": "k"}', 422, "key: unknown field"),
        (b'{"key": "k", "value": 1e999}', 422, "too large"),
        (b'{"key": "\\ud800", "value": 1}', 422, "key"),
        (b'{"key": "k", "value": 1, "headers": {"h": "\\udcff"}}', 422, "header name or value"),
        (b'{"key": "k", "value": 1, "headers": {"\\ud800": "v"}}', 422, "header name or value"),
        # Values that could be stored but never served back as JSON (see _unservable).
        (b'{"key": "k", "value": "\\ud800"}', 422, "records[0].value holds a string with a lone"),
        (b'{"key": "k", "value": {"a": ["x", {"\\udfff": 1}]}}', 422, "lone UTF-16 surrogate"),
        (b'{"records": [{"key": "a", "value": 1}, {"key": "b", "value": '
         + b"[" * 129 + b"]" * 129 + b"}]}", 422, "records[1].value is nested more than 128"),
    ],
)
def test_bad_bodies_are_refused_and_nothing_is_appended(
    shared: tuple[Client, InMemoryTestBackend], body: bytes, status: int, fragment: str
) -> None:
    client, backend = shared
    reply = client.post_raw(body)
    assert reply.status == status, reply.body
    assert reply.headers["content-type"] == "application/json"
    assert fragment in reply.json()["error"]
    assert backend.appends == []


def test_values_at_the_limits_are_accepted_and_read_back(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    """A surrogate *pair* (an emoji written as two escapes) is Unicode; 128 levels are fine;
    brackets inside strings do not count as nesting."""
    client = serve()
    deep: object = 0
    for _ in range(128):
        deep = [deep]
    accepted = [
        ("emoji", b'{"key": "emoji", "value": {"\\ud83d\\ude00": "\\ud83d\\ude00"}}',
         {"\U0001f600": "\U0001f600"}),
        ("deep", json.dumps({"key": "deep", "value": deep}).encode(), deep),
        ("brackets", json.dumps({"key": "brackets", "value": "[" * 500}).encode(), "[" * 500),
    ]
    for key, body, _ in accepted:
        assert client.post_raw(body).status == 200, key
    records = client.get("/v1/records?from_offset=0").json()["records"]
    assert [(r["key"], r["value"]) for r in records] == [(k, v) for k, _, v in accepted]


def test_stored_values_http_cannot_serve_as_json_are_read_back_as_text(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    """Records written by other clients (the native one takes any bytes) with a lone surrogate
    escape or deep nesting: the read answers with their JSON text instead of failing with 500
    on every page that holds them."""
    client = serve()
    lone = b'{"a":"\\uD800"}'
    deep = b"[" * 300 + b"]" * 300
    backend.log.append(CommittedRecord(0, 3, T, b"lone", lone, ()))
    backend.log.append(CommittedRecord(1, 3, T, b"deep", deep, ()))
    backend.log.append(CommittedRecord(2, 3, T, b"fine", b'{"a":1}', ()))
    reply = client.get("/v1/records?from_offset=0")
    assert reply.status == 200, reply.body
    assert [r["value"] for r in reply.json()["records"]] == [
        lone.decode(), deep.decode(), {"a": 1}
    ]


def test_offsets_beyond_int64_are_422(serve: Serve) -> None:
    client = serve()
    assert client.get(f"/v1/records?from_offset={2**63 - 1}").json()["records"] == []
    for offset in (2**63, 10**30):
        reply = client.get(f"/v1/records?from_offset={offset}")
        assert reply.status == 422, reply.body
        assert "from_offset" in reply.json()["error"]


def test_non_json_content_type_is_refused(serve: Serve, backend: InMemoryTestBackend) -> None:
    client = serve()
    reply = client.post_raw(b'{"key": "k", "value": 1}', {"Content-Type": "text/plain"})
    assert reply.status == 415
    assert "application/json" in reply.json()["error"]
    ok = client.post_raw(b'{"key": "k", "value": 1}', {"Content-Type": "application/json; "
                                                       "charset=utf-8"})
    assert ok.status == 200
    assert len(backend.appends) == 1


def test_too_many_records_in_a_batch(serve: Serve, backend: InMemoryTestBackend) -> None:
    client = serve(max_records=3)
    reply = client.post({"records": [{"key": "k", "value": i} for i in range(4)]})
    assert reply.status == 422
    assert "limit of 3" in reply.json()["error"]
    assert backend.appends == []


# --------------------------------------------------------------------------- size limits


def test_declared_oversized_body_is_refused_before_it_is_sent(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve(max_body_bytes=1000)
    conn = http.client.HTTPConnection("127.0.0.1", client.port, timeout=20)
    try:
        conn.putrequest("POST", "/v1/records")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(10**9))
        conn.endheaders()  # no body is ever sent
        response = conn.getresponse()
        assert response.status == 413
        assert "10000000000"[:10] in json.loads(response.read())["error"]
    finally:
        conn.close()
    assert backend.appends == []


def test_oversized_body_with_content_length_is_413(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve()  # default limit 1 MiB
    value = "x" * (3 * 1024 * 1024)
    reply = client.post({"key": "k", "value": value})
    assert reply.status == 413
    assert "limit of 1048576 bytes" in reply.json()["error"]
    assert backend.appends == []
    assert client.post({"key": "k", "value": 1}).status == 200  # the server is fine


def test_oversized_chunked_body_is_413_without_buffering_it(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve(max_body_bytes=1000)

    def chunks() -> Iterator[bytes]:
        yield b'{"key": "k", "value": "'
        for _ in range(50):
            yield b"y" * 100
        yield b'"}'

    conn = http.client.HTTPConnection("127.0.0.1", client.port, timeout=20)
    try:
        conn.request("POST", "/v1/records", body=chunks(), headers=JSON, encode_chunked=True)
        response = conn.getresponse()
        assert response.status == 413
        assert "exceeds the limit of 1000 bytes" in json.loads(response.read())["error"]
    finally:
        conn.close()
    assert backend.appends == []

    def small() -> Iterator[bytes]:
        yield b'{"key": "k", '
        yield b'"value": 1}'

    conn = http.client.HTTPConnection("127.0.0.1", client.port, timeout=20)
    try:
        conn.request("POST", "/v1/records", body=small(), headers=JSON, encode_chunked=True)
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def test_oversized_record_is_413_and_nothing_of_the_batch_is_appended(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve(max_record_bytes=100)
    # key 1 + value '"' + 95 x + '"' (97) + header "h" + "v" (2) = 100: exactly the limit.
    at_limit = {"key": "k", "value": "x" * 95, "headers": {"h": "v"}}
    over = {"key": "k", "value": "x" * 96, "headers": {"h": "v"}}
    reply = client.post({"records": [at_limit, over]})
    assert reply.status == 413
    assert "records[1] is 101 bytes" in reply.json()["error"]
    assert backend.appends == []
    assert client.post(at_limit).status == 200


def test_quorum_refusing_a_batch_as_too_large_is_413(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve()
    backend.fail_with = RecordTooLargeError("MESSAGE_TOO_LARGE")
    reply = client.post({"key": "k", "value": 1})
    assert reply.status == 413
    assert "MESSAGE_TOO_LARGE" in reply.json()["error"]


# --------------------------------------------------------------------------- backend errors


def test_no_leader_is_503_with_retry_after(serve: Serve, backend: InMemoryTestBackend) -> None:
    client = serve()
    backend.fail_with = NoLeaderError("no voter named a leader within 10 s")
    reply = client.post({"key": "k", "value": 1})
    assert reply.status == 503
    assert reply.headers["retry-after"] == "1"
    assert "no quorum leader" in reply.json()["error"]
    backend.describe_error = NoLeaderError("election in progress")
    for path in ("/v1/quorum", "/v1/quorum/replication", "/readyz"):
        reply = client.get(path)
        assert reply.status == 503, path
        assert reply.headers["retry-after"] == "1"


def test_commit_timeout_is_504_saying_it_may_still_commit(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve(commit_timeout_s=7.0)
    backend.fail_with = CommitTimeoutError("commit not confirmed")
    reply = client.post({"key": "k", "value": 1})
    assert reply.status == 504
    message = reply.json()["error"]
    assert "may still commit" in message
    assert "Idempotency-Key" in message
    assert backend.timeouts == [7.0]


# --------------------------------------------------------------------------- idempotency


def test_sequential_retry_with_the_same_key_returns_the_first_result(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve()
    body = {"records": [{"key": "a", "value": 1}, {"key": "b", "value": 2}]}
    first = client.post(body, {"Idempotency-Key": "req-1"})
    second = client.post(body, {"Idempotency-Key": "req-1"})
    assert first.status == second.status == 200
    assert first.json() == second.json() == {"base_offset": 0, "last_offset": 1, "epoch": 3}
    assert second.headers["idempotent-replayed"] == "true"
    assert len(backend.appends) == 1
    # The same bytes with other whitespace are the same request.
    spaced = json.dumps(body, indent=2).encode()
    assert client.post_raw(spaced, {"Idempotency-Key": "req-1"}).json() == first.json()
    # Another key appends again.
    assert client.post(body, {"Idempotency-Key": "req-2"}).json()["base_offset"] == 2
    assert len(backend.appends) == 2
    # The key reaches the quorum, which dedupes retries through other nodes or leaders.
    assert backend.keys == ["req-1", "req-2"]


def test_same_key_with_a_different_body_is_422(serve: Serve, backend: InMemoryTestBackend) -> None:
    client = serve()
    assert client.post({"key": "k", "value": 1}, {"Idempotency-Key": "x"}).status == 200
    reply = client.post({"key": "k", "value": 2}, {"Idempotency-Key": "x"})
    assert reply.status == 422
    assert "already used for a different request body" in reply.json()["error"]
    assert len(backend.appends) == 1


def test_concurrent_retry_shares_the_in_flight_append(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve()
    backend.hold = threading.Event()
    body = {"key": "k", "value": "v"}
    with ThreadPoolExecutor(max_workers=3) as pool:
        first = pool.submit(client.post, body, {"Idempotency-Key": "K"})
        assert backend.entered.wait(10)
        retries = [pool.submit(client.post, body, {"Idempotency-Key": "K"}) for _ in range(2)]
        time.sleep(0.3)  # let the retries reach the server and wait on the shared append
        assert not any(f.done() for f in (first, *retries))
        other = client.post({"key": "k", "value": "other"}, {"Idempotency-Key": "K"})
        assert other.status == 422  # a different body under an in-flight key
        backend.hold.set()
        replies = [f.result(timeout=20) for f in (first, *retries)]
    assert [r.status for r in replies] == [200, 200, 200]
    assert {json.dumps(r.json()) for r in replies} == {
        json.dumps({"base_offset": 0, "last_offset": 0, "epoch": 3})
    }
    assert [r.headers.get("idempotent-replayed") for r in replies] == [None, "true", "true"]
    assert len(backend.appends) == 1
    assert len(backend.log) == 1


def test_keyed_append_keeps_committing_after_a_504_and_a_retry_collects_it(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve(commit_timeout_s=0.3, background_commit_s=30.0)
    backend.hold = threading.Event()
    body = {"key": "k", "value": 1}
    reply = client.post(body, {"Idempotency-Key": "slow"})
    assert reply.status == 504
    assert "retry with the same Idempotency-Key" in reply.json()["error"]
    assert backend.timeouts == [30.0]  # the append itself waits longer than the request
    backend.hold.set()
    retry = client.post(body, {"Idempotency-Key": "slow"})
    assert retry.status == 200
    assert retry.json() == {"base_offset": 0, "last_offset": 0, "epoch": 3}
    assert len(backend.appends) == 1


def test_key_is_forgotten_when_nothing_was_appended(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve()
    backend.fail_with = NoLeaderError("no leader")
    body = {"key": "k", "value": 1}
    assert client.post(body, {"Idempotency-Key": "n"}).status == 503
    backend.fail_with = None
    reply = client.post(body, {"Idempotency-Key": "n"})
    assert reply.status == 200
    assert "idempotent-replayed" not in reply.headers
    assert len(backend.log) == 1


def test_key_with_an_unknown_outcome_asks_the_quorum_again_under_the_key(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    # The quorum dedupes by key (tests/net/test_node_http.py shows it across a leader change):
    # the retry must carry the same key to it, not be answered from this process's memory.
    client = serve()
    backend.fail_with = CommitTimeoutError("not confirmed")
    body = {"key": "k", "value": 1}
    first = client.post(body, {"Idempotency-Key": "u"})
    assert first.status == 504
    assert "Retry with the same key" in first.json()["error"]
    backend.fail_with = None
    assert client.post(body, {"Idempotency-Key": "u"}).status == 200
    assert backend.keys == ["u", "u"]


def test_idempotency_keys_are_bounded(serve: Serve, backend: InMemoryTestBackend) -> None:
    client = serve(idempotency_keys=2)
    body = {"key": "k", "value": 1}
    for key in ("a", "b", "c"):
        assert client.post(body, {"Idempotency-Key": key}).status == 200
    assert client.post(body, {"Idempotency-Key": "c"}).headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in client.post(body, {"Idempotency-Key": "a"}).headers
    assert len(backend.appends) == 4


def test_overlong_idempotency_key_is_422(serve: Serve, backend: InMemoryTestBackend) -> None:
    client = serve()
    reply = client.post({"key": "k", "value": 1}, {"Idempotency-Key": "x" * 256})
    assert reply.status == 422
    assert "Idempotency-Key" in reply.json()["error"]
    assert backend.appends == []


# --------------------------------------------------------------------------- auth


def test_bearer_token_guards_every_path_but_the_probes(
    serve: Serve, backend: InMemoryTestBackend
) -> None:
    client = serve(credentials=Credentials.single("s3cret-token"))
    body = {"key": "k", "value": 1}
    missing = client.post(body)
    assert missing.status == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert "Authorization" in missing.json()["error"]
    wrong = client.post(body, {"Authorization": "Bearer s3cret-tokeN"})
    assert wrong.status == 401
    assert "invalid_token" in wrong.headers["www-authenticate"]
    assert client.post(body, {"Authorization": "Basic s3cret-token"}).status == 401
    assert backend.appends == []
    for path in ("/v1/records", "/v1/quorum", "/metrics", "/docs", "/openapi.json",
                 "/v1/kv/k", "/v1/leases"):
        assert client.get(path).status == 401, path
    assert client.get("/healthz").status == 200
    assert client.get("/readyz").status == 200
    client.auth = {"Authorization": "Bearer s3cret-token"}
    assert client.post(body).status == 200
    assert client.get("/v1/quorum").status == 200
    assert client.get("/docs").status == 200
    assert len(backend.appends) == 1


SCOPED = Credentials([Credential(Scope.READ, "r-token", "dashboard"),
                      Credential(Scope.WRITE, "w-token", "app"),
                      Credential(Scope.ADMIN, "a-token", "ops")])


@pytest.mark.parametrize("method,path,needed", [
    ("GET", "/v1/records", Scope.READ),
    ("GET", "/v1/quorum", Scope.READ),
    ("GET", "/metrics", Scope.READ),
    ("POST", "/v1/records", Scope.WRITE),
    ("POST", "/v1/leases", Scope.WRITE),
    ("DELETE", "/v1/leases/7", Scope.WRITE),
    ("POST", "/v1/quorum/voters", Scope.ADMIN),
    ("DELETE", "/v1/quorum/voters/2", Scope.ADMIN),
])
def test_each_call_needs_its_scope_and_a_smaller_one_gets_403(
    serve: Serve, backend: InMemoryTestBackend, method: str, path: str, needed: Scope
) -> None:
    client = serve(credentials=SCOPED)
    body = {"key": "k", "value": 1} if path == "/v1/records" else {}
    for credential in SCOPED.entries:
        payload = json.dumps(body).encode() if method == "POST" else None
        reply = client.request(method, path, payload,
                               {"Authorization": f"Bearer {credential.token}",
                                "Content-Type": "application/json"})
        if credential.scope < needed:
            assert reply.status == 403, (credential.name, reply.status)
            error = reply.json()["error"]
            assert f"needs scope {needed.label}" in error and repr(credential.name) in error
            assert credential.token not in error
            assert 'error="insufficient_scope"' in reply.headers["www-authenticate"]
        else:  # past authentication: whatever the route answers, never 401/403
            assert reply.status not in (401, 403), (credential.name, reply.status, reply.body)
    # Appends went through only with write or admin (the fast path checks the scope too).
    assert len(backend.appends) == (2 if (method, path) == ("POST", "/v1/records") else 0)


# --------------------------------------------------------------------------- quorum and operations


def test_quorum_endpoints_answer_describe_quorum(serve: Serve) -> None:
    client = serve()
    quorum = client.get("/v1/quorum")
    assert quorum.status == 200
    assert quorum.json() == {
        "clusterId": "test-cluster",
        "leaderId": 1,
        "leaderEpoch": 3,
        "highWatermark": 10,
        "maxFollowerLag": 2,
        "maxFollowerLagTimeMs": 20,
        "currentVoters": [{"id": i, "directoryId": None, "endpoints": []} for i in (0, 1, 2)],
        "currentObservers": [{"id": 3000, "directoryId": None, "endpoints": []}],
        "voters": [
            {"replicaId": 0, "directoryId": None, "logEndOffset": 8, "lastFetchTimestamp": T - 5,
             "lastCaughtUpTimestamp": T - 20},
            {"replicaId": 1, "directoryId": None, "logEndOffset": 10, "lastFetchTimestamp": T,
             "lastCaughtUpTimestamp": T},
            {"replicaId": 2, "directoryId": None, "logEndOffset": 10, "lastFetchTimestamp": T - 1,
             "lastCaughtUpTimestamp": T - 1},
        ],
        "observers": [
            {"replicaId": 3000, "directoryId": None, "logEndOffset": 4, "lastFetchTimestamp": T - 2,
             "lastCaughtUpTimestamp": -1},
        ],
        # KIP-630 (the fake backend's QuorumInfo leaves them unknown)
        "logStartOffset": -1,
        "latestSnapshot": None,
        # no node serves the HTTP API itself here
        "httpUrls": None,
        "leaderHttpUrl": None,
    }
    rows = client.get("/v1/quorum/replication").json()
    assert [(r["nodeId"], r["lag"], r["status"]) for r in rows] == [
        (1, 0, "Leader"), (0, 2, "Follower"), (2, 0, "Follower"), (3000, 6, "Observer")
    ]


def test_quorum_names_each_nodes_http_api_and_the_leaders(serve: Serve) -> None:
    urls = {i: f"http://127.0.0.1:{8081 + i}" for i in (0, 1, 2)}
    quorum = serve(http_urls=lambda: urls).get("/v1/quorum").json()
    assert quorum["httpUrls"] == {str(i): url for i, url in urls.items()}
    assert quorum["leaderHttpUrl"] == urls[1]  # the fake quorum's leader


def test_health_and_readiness(serve: Serve, backend: InMemoryTestBackend) -> None:
    client = serve()
    assert client.get("/healthz").json() == {"status": "ok", "leaderId": None,
                                            "leaderEpoch": None}
    ready = client.get("/readyz")
    assert ready.status == 200
    assert ready.json()["leaderId"] == 1
    backend.quorum = QuorumInfo("test-cluster", -1, 4, 10)
    not_ready = client.get("/readyz")
    assert not_ready.status == 503
    assert "no quorum leader" in not_ready.json()["error"]
    assert client.get("/healthz").status == 200


def test_metrics_expose_request_latency(serve: Serve) -> None:
    registry = Registry()
    registry.gauge("kafka_raft_high_watermark", "hw").set(10)
    client = serve(metrics=registry)
    assert client.post({"key": "k", "value": 1}).status == 200
    assert client.get("/nope").status == 404
    reply = client.get("/metrics")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = reply.body.decode()
    assert "# TYPE kraft_spark_http_request_latency_ms_avg gauge" in text
    assert 'kraft_spark_http_request_latency_ms_avg{method="POST",route="/v1/records"}' in text
    assert 'kraft_spark_http_request_latency_ms_max{method="POST",route="/v1/records"}' in text
    values = samples(text)
    assert values['kraft_spark_http_requests_total{method="POST",route="/v1/records",'
                  'status="200"}'] == 1
    assert values['kraft_spark_http_requests_total{method="GET",route="unmatched",'
                  'status="404"}'] == 1
    assert values["kraft_spark_http_appended_records_total"] == 1
    assert values["kafka_raft_high_watermark"] == 10


def test_docs_and_openapi_describe_the_request_body(serve: Serve) -> None:
    client = serve()
    docs = client.get("/docs")
    assert docs.status == 200
    assert b"swagger" in docs.body.lower()
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/v1/records"]["post"]["requestBody"]["content"]["application/json"]
    refs = {option["$ref"] for option in body["schema"]["anyOf"]}
    assert refs == {"#/components/schemas/RecordIn", "#/components/schemas/BatchIn",
                    "#/components/schemas/ConditionalBatchIn"}
    assert set(schema["components"]["schemas"]["RecordIn"]["properties"]) == {
        "key", "value", "headers"
    }
    post = schema["paths"]["/v1/records"]["post"]
    assert any(p["name"] == "Idempotency-Key" for p in post["parameters"])
    assert {"200", "413", "503", "504"} <= set(post["responses"])


def test_unknown_path_and_method_are_json_errors(serve: Serve) -> None:
    client = serve()
    missing = client.get("/v2/nothing")
    assert missing.status == 404
    assert missing.json() == {"error": "Not Found"}
    wrong = client.request("DELETE", "/v1/records")
    assert wrong.status == 405
    assert "error" in wrong.json()


# --------------------------------------------------------------------------- lifecycle


def test_factory_backend_lives_and_closes_on_the_server_loop() -> None:
    made: list[InMemoryTestBackend] = []
    threads: list[int] = []

    def factory() -> InMemoryTestBackend:
        backend = InMemoryTestBackend()
        backend.loop = asyncio.get_running_loop()  # the factory runs on the serving loop
        threads.append(threading.get_ident())
        made.append(backend)
        return backend

    handle = serve_in_thread(create_app(backend_factory=factory))
    try:
        client = Client(handle.port)
        assert client.post({"key": "k", "value": 1}).status == 200
        assert len(made) == 1
        assert threads[0] != threading.get_ident()
    finally:
        handle.stop()
    assert made[0].close_loop is made[0].loop
    assert not handle.running
    handle.stop()  # idempotent


def test_stop_waits_for_requests_in_flight(backend: InMemoryTestBackend) -> None:
    handle = serve_in_thread(create_app(backend))
    backend.hold = threading.Event()
    try:
        client = Client(handle.port)
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(client.post, {"key": "k", "value": 1})
            assert backend.entered.wait(10)
            stopper = threading.Thread(target=handle.stop)
            stopper.start()
            time.sleep(0.3)
            assert handle.running  # still serving the request in flight
            backend.hold.set()
            assert pending.result(timeout=20).status == 200
            stopper.join(20)
        assert not handle.running
    finally:
        backend.hold.set()
        handle.stop()


def test_create_app_needs_exactly_one_backend_source(backend: InMemoryTestBackend) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        create_app()
    with pytest.raises(ValueError, match="exactly one"):
        create_app(backend, backend_factory=InMemoryTestBackend)


def test_startup_failure_is_reported_and_leaves_nothing_running() -> None:
    def factory() -> InMemoryTestBackend:
        raise RuntimeError("cannot reach the quorum")

    before = threading.active_count()
    with pytest.raises(RuntimeError, match="failed to start"):
        serve_in_thread(create_app(backend_factory=factory))
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before


def test_unexpected_backend_error_is_a_json_500(
    serve: Serve, backend: InMemoryTestBackend, caplog: pytest.LogCaptureFixture
) -> None:
    client = serve()
    backend.fail_with = RuntimeError("disk on fire")
    with caplog.at_level("CRITICAL"):  # the traceback is logged; keep the test output quiet
        reply = client.post({"key": "k", "value": 1})
    assert reply.status == 500
    assert "disk on fire" in reply.json()["error"]


def test_stop_cancels_keyed_appends_still_waiting_for_their_commit(
    backend: InMemoryTestBackend,
) -> None:
    handle = serve_in_thread(create_app(backend, commit_timeout_s=0.2))
    backend.hold = threading.Event()
    try:
        reply = Client(handle.port).post({"key": "k", "value": 1}, {"Idempotency-Key": "z"})
        assert reply.status == 504
        started = time.monotonic()
        handle.stop()
        assert time.monotonic() - started < 5  # not the 60 s the append could still wait
        assert backend.log == []
    finally:
        backend.hold.set()
        handle.stop()


def test_fast_append_goes_around_fastapi_middleware_stack(backend: InMemoryTestBackend) -> None:
    """Appends take the front door (metrics and auth, then the fast path); every other request
    goes through FastAPI's own stack."""
    app = create_app(backend, credentials=Credentials.single("t0ken"))
    handle = serve_in_thread(app)
    try:
        stack = app.middleware_stack  # built at startup (the lifespan goes through it)
        assert stack is not None
        through_stack: list[str] = []

        async def counting(scope: Any, receive: Any, send: Any) -> None:
            through_stack.append(str(scope.get("path")))
            await stack(scope, receive, send)

        app.middleware_stack = counting
        client = Client(handle.port)
        assert client.post({"key": "k", "value": 1}).status == 401  # auth still applies
        client.auth = {"Authorization": "Bearer t0ken"}
        assert client.post({"key": "k", "value": 1}).status == 200
        assert through_stack == []
        assert client.get("/v1/records").status == 200
        assert through_stack == ["/v1/records"]
        metrics = client.get("/metrics").body.decode()
        assert 'method="POST",route="/v1/records",status="200"' in metrics
        # Auth answers before the route is known, as it always did.
        assert 'method="POST",route="unmatched",status="401"' in metrics
    finally:
        handle.stop()


def test_fast_append_answers_exactly_as_the_fastapi_route() -> None:
    """The fast path and FastAPI's route give the same status, body and headers for the same
    sequence of requests (each app against its own fresh backend)."""
    requests: list[tuple[bytes, dict[str, str]]] = [
        (b'{"key": "a", "value": {"n": 1}}', {}),
        (b'{"records": [{"key": "b", "value": 1}, {"key": "c", "value": null}]}', {}),
        (b'{"key": "a", "value": 2}', {"Idempotency-Key": "k1"}),
        (b'{"key": "a", "value": 2}', {"Idempotency-Key": "k1"}),  # a replay
        (b'{"key": "a", "value": 3}', {"Idempotency-Key": "k1"}),  # same key, other body
        (b'{"key": "a", "value": 2}', {"Idempotency-Key": ""}),
        (b'{"key": "a", "value": 2}', {"Idempotency-Key": "x" * 256}),
        (b'{"key": "a", "value": ', {}),
        (b"[1, 2]", {}),
        (b"", {}),
        (b'{"key": "a", "value": 1, "extra": true}', {}),
        (b'{"key": "", "value": 1}', {}),
        (b'{"records": []}', {}),
        (b'{"key": "a", "value": NaN}', {}),
        (b'{"key": "a", "value": 1}', {"Content-Type": "text/plain"}),
        (b'{"key": "a", "value": "' + b"x" * 2000 + b'"}', {}),
    ]
    answers: dict[bool, list[tuple[int, dict[str, str], Any]]] = {}
    for fast in (True, False):
        handle = serve_in_thread(
            create_app(InMemoryTestBackend(), fast_append=fast, max_body_bytes=1500)
        )
        try:
            client = Client(handle.port)
            answers[fast] = []
            for body, headers in requests:
                reply = client.post_raw(body, headers)
                kept = {k: v for k, v in reply.headers.items()
                        if k in ("content-type", "idempotent-replayed", "retry-after")}
                answers[fast].append((reply.status, kept, reply.json()))
        finally:
            handle.stop()
    statuses = [a[0] for a in answers[True]]
    assert statuses == [200, 200, 200, 200, 422, 422, 422, 400, 422, 400, 422, 422, 422, 400,
                        415, 413]
    assert answers[True][3][1].get("idempotent-replayed") == "true"
    for index, (quick, routed) in enumerate(zip(answers[True], answers[False], strict=True)):
        assert quick == routed, f"request {index}: {requests[index]!r}"
