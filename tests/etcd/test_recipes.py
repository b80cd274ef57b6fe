"""The recipes' requests (``kraft_spark.etcd.recipes``) planned on a view: what the Lock and
Election services send, judged by the same planner as a remote Txn."""

from __future__ import annotations

from kraft_spark.etcd.kv import View
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.etcd.plan import Plan
from kraft_spark.etcd.recipes import (
    acquire,
    campaign,
    first_created,
    holds,
    last_created_before,
    my_revision,
    proclaim,
    resign,
    session_key,
)
from kraft_spark.state.machine import Entry


def _view(keys: dict[bytes, Entry], applied: int = 100) -> View:
    return View(keys.get, keys.items, applied)


def _entry(create: int, value: bytes = b"", lease: int = 7) -> Entry:
    return Entry(value, create, 0, 0, create, 1, lease)


def test_session_key_is_go_hex() -> None:
    assert session_key(b"lk/", 0x7a3346cbe3327) == b"lk/7a3346cbe3327"


def test_acquire_free_lock_holds_it() -> None:
    plan = Plan(_view({}))
    response = plan.txn(acquire(b"lk/", 0xab))
    assert response.succeeded and [w.key for w in plan.writes] == [b"lk/ab"]
    assert plan.writes[0].lease == 0xab
    plan.settle(response, 100)
    response.header.revision = 100
    assert my_revision(response) == 100 and holds(response, 100)


def test_acquire_behind_an_owner_waits_for_it() -> None:
    plan = Plan(_view({b"lk/1": _entry(40), b"lk/2": _entry(60)}))
    response = plan.txn(acquire(b"lk/", 3))
    plan.settle(response, 100)
    response.header.revision = 100
    assert response.responses[1].response_range.kvs[0].key == b"lk/1"
    assert not holds(response, my_revision(response))


def test_acquire_again_keeps_the_first_revision() -> None:
    response = Plan(_view({b"lk/1": _entry(40)})).txn(acquire(b"lk/", 1))
    assert not response.succeeded and my_revision(response) == 40 and holds(response, 40)


def test_waiting_reads_the_newest_key_created_before() -> None:
    view = _view({b"lk/1": _entry(40), b"lk/2": _entry(60), b"lk/3": _entry(80),
                  b"lm": _entry(10)})
    found = Plan(view).range(last_created_before(b"lk/", 79))
    assert [kv.key for kv in found.kvs] == [b"lk/2"]
    assert [kv.key for kv in Plan(view).range(first_created(b"lk/")).kvs] == [b"lk/1"]


def test_election_requests() -> None:
    view = _view({b"el/1": _entry(40, b"v1", 1)})
    assert not Plan(view).txn(campaign(b"el/", 1, b"v2")).succeeded
    plan = Plan(view)
    assert plan.txn(proclaim(b"el/1", 40, 1, b"v2")).succeeded
    assert plan.writes[0].value == b"v2"
    assert not Plan(view).txn(proclaim(b"el/1", 41, 1, b"v2")).succeeded
    plan = Plan(view)
    assert plan.txn(resign(b"el/1", 40)).succeeded and plan.writes[0].value is None
    resigned = Plan(view)
    assert not resigned.txn(resign(b"el/1", 39)).succeeded and not resigned.writes
    assert isinstance(campaign(b"el/", 1, b"v"), rpc_pb2.TxnRequest)
