"""``POST /v1/records`` (both ways in: the fast ASGI path and FastAPI's route) refuses the
store's reserved headers among the caller's own (``kraft_spark.store.reserved_headers``):
``kraft.txn`` and ``kraft.lease`` slipped in by hand used to be answered 200 whatever the state
machine made of them. Each refusal is a 422 naming the record, the header and the field to use,
and nothing of the request is appended. Over real HTTP on loopback, the quorum replaced by the
sidecar tests' in-memory backend."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from api.app import create_app
from api.server import serve_in_thread
from kraft_spark.store.leases import encode_op
from kraft_spark.store.txn import Condition, encode_header

from .test_sidecar import Client, InMemoryTestBackend

pytestmark = [pytest.mark.timeout(60), pytest.mark.loop_free]

TXN = encode_header(1, [Condition(b"k", version=0)]).decode()


@pytest.fixture(scope="module", params=[True, False], ids=["fast-append", "fastapi-append"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Client, InMemoryTestBackend]]:
    backend = InMemoryTestBackend()
    handle = serve_in_thread(create_app(backend, fast_append=bool(request.param)))
    try:
        yield Client(handle.port), backend
    finally:
        handle.stop()


def batch(headers: dict[str, str], **beside: Any) -> dict[str, Any]:
    return {"records": [{"key": "a", "value": 1},
                        {"key": "b", "value": 2, "headers": {"source": "x", **headers}}],
            **beside}


@pytest.mark.parametrize("body, header, fix", [
    (batch({"kraft.txn": TXN}), "kraft.txn", '"conditions"'),
    (batch({"kraft.lease": "42"}), "kraft.lease", '"lease_id"'),
    (batch({"kraft.lease.op": encode_op("revoke", 42).decode()}), "kraft.lease.op",
     "/v1/leases"),
    # Beside the fields that write the others: still the caller's own header, still refused.
    (batch({"kraft.txn": TXN}, lease_id=42), "kraft.txn", '"conditions"'),
    (batch({"kraft.lease": "42"}, conditions=[{"key": "a", "exists": False}]), "kraft.lease",
     '"lease_id"'),
    (batch({"kraft.lease.deleted": '["victim"]'}), "kraft.lease.deleted", "Delta"),
    (batch({"kraft.txn.outcome": "failed"}), "kraft.txn.outcome", "Delta"),
], ids=["txn", "lease", "lease-op", "txn-beside-lease-id", "lease-beside-conditions",
        "lease-deleted", "txn-outcome"])
def test_a_reserved_header_among_the_callers_own_is_422_and_nothing_is_appended(
        served: tuple[Client, InMemoryTestBackend], body: dict[str, Any], header: str,
        fix: str) -> None:
    client, backend = served
    before = len(backend.appends)
    reply = client.post(body)
    assert reply.status == 422, reply.body
    error = json.loads(reply.body)["error"]
    assert error.startswith(f"records[1].headers: {header} ") and "reserved" in error, error
    assert fix in error, error
    assert len(backend.appends) == before


def test_other_headers_under_kraft_still_pass(
        served: tuple[Client, InMemoryTestBackend]) -> None:
    client, backend = served
    reply = client.post(batch({"kraft.source": "etl", "trace": "t-1"}))
    assert reply.status == 200, reply.body
    assert backend.appends[-1][1].headers == (
        ("source", b"x"), ("kraft.source", b"etl"), ("trace", b"t-1"))
