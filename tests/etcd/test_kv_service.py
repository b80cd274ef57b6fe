"""etcd's KV service (``api.etcd.kv``) over a fake context: which requests wait for the read
index before they are planned."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from api.etcd.kv import KvServicer
from kraft_spark.etcd import errors
from kraft_spark.etcd.kv import View
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.etcd.plan import Plan


class FakeContext:
    """Records the order of read indexes and plans; the view holds no key."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def read_view(self, *, serializable: bool) -> View:
        self.calls.append("serializable read" if serializable else "read index")
        return self.view()

    def view(self) -> View:
        return View(lambda _key: None, lambda: iter(()), 5)

    def lease_keys(self, _lease_id: int) -> frozenset[bytes]:
        return frozenset()

    async def write(self, build: Callable[[Plan], Any]) -> tuple[Any, int]:
        self.calls.append("plan")
        plan = Plan(self.view())
        return build(plan), plan.view.revision

    def header(self, revision: int | None = None) -> rpc_pb2.ResponseHeader:
        return rpc_pb2.ResponseHeader(revision=revision or 0)


def _call(method: str, request: Any) -> list[str]:
    ctx = FakeContext()
    servicer = KvServicer(ctx)  # type: ignore[arg-type]
    with contextlib.suppress(errors.EtcdError):  # ignore_value on an absent key
        asyncio.run(getattr(servicer, method)(request, None, None))
    return ctx.calls


def test_a_delete_that_may_find_nothing_is_planned_after_the_read_index() -> None:
    """Found on real processes with clientv3 (tests/etcd/test_go_client.py): a DeleteRange
    served by a lagging node found the key absent in its own view, appended nothing and
    answered OK, though a put the client had seen acknowledged was not deleted."""
    assert _call("DeleteRange", rpc_pb2.DeleteRangeRequest(key=b"k")) == ["read index", "plan"]


def test_a_put_that_reads_the_key_is_planned_after_the_read_index() -> None:
    assert _call("Put", rpc_pb2.PutRequest(key=b"k", value=b"v")) == ["plan"]
    assert _call("Put", rpc_pb2.PutRequest(key=b"k", ignore_value=True)) == [
        "read index", "plan"]
