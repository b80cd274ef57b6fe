"""etcd's Alarm and the state hash (``api.etcd.maintenance``) over a fake context: a node
whose log directory failed with a full disk reports NOSPACE, any other node no alarm; the
hash of a state does not depend on the order its keys are held in."""

from __future__ import annotations

import asyncio
import errno
from typing import Any

import pytest

from api.etcd.maintenance import MaintenanceServicer, state_hash
from kraft_spark.etcd import errors
from kraft_spark.etcd.kv import View
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.net.storage_failure import storage_failure_text
from kraft_spark.state.machine import Entry


class FakeNode:
    def __init__(self, failure: BaseException | None) -> None:
        self.failure = failure

    def describe(self) -> dict[str, Any]:
        failed = self.failure
        return {"storage_failure": None if failed is None else storage_failure_text(failed)}


class FakeContext:
    member_id = 7

    def __init__(self, failure: BaseException | None) -> None:
        self.node = FakeNode(failure)

    def header(self, revision: int | None = None) -> rpc_pb2.ResponseHeader:
        return rpc_pb2.ResponseHeader(revision=revision or 0)


def _alarm(failure: BaseException | None, action: int,
           alarm: int = rpc_pb2.NONE) -> list[tuple[int, int]]:
    servicer = MaintenanceServicer(FakeContext(failure), None)  # type: ignore[arg-type]
    answer = asyncio.run(servicer.Alarm(rpc_pb2.AlarmRequest(action=action, alarm=alarm),
                                        None, None))
    return [(a.memberID, a.alarm) for a in answer.alarms]


def test_a_full_disk_is_nospace_and_nothing_else_is_an_alarm() -> None:
    full = OSError(errno.ENOSPC, "No space left on device")
    assert _alarm(full, rpc_pb2.AlarmRequest.GET) == [(7, rpc_pb2.NOSPACE)]
    assert _alarm(full, rpc_pb2.AlarmRequest.GET, rpc_pb2.NOSPACE) == [(7, rpc_pb2.NOSPACE)]
    assert _alarm(full, rpc_pb2.AlarmRequest.GET, rpc_pb2.CORRUPT) == []
    assert _alarm(OSError(errno.EIO, "Input/output error"), rpc_pb2.AlarmRequest.GET) == []
    assert _alarm(None, rpc_pb2.AlarmRequest.GET) == []
    # Nothing to disarm (no alarm store), nothing to activate for NONE, as etcd answers.
    assert _alarm(None, rpc_pb2.AlarmRequest.DEACTIVATE, rpc_pb2.NOSPACE) == []
    assert _alarm(None, rpc_pb2.AlarmRequest.ACTIVATE, rpc_pb2.NONE) == []
    with pytest.raises(errors.EtcdError) as refused:
        _alarm(None, rpc_pb2.AlarmRequest.ACTIVATE, rpc_pb2.NOSPACE)
    assert refused.value.code == "UNIMPLEMENTED"


def _view(entries: dict[bytes, Entry]) -> View:
    return View(entries.get, lambda: iter(entries.items()), 10)


def test_the_state_hash_is_of_the_keys_in_key_order() -> None:
    a, b = Entry(b"1", 3, 0, 0, 3, 1, 0), Entry(b"2", 5, 0, 0, 4, 2, 0)
    held = state_hash(_view({b"a": a, b"b": b}))
    assert held == state_hash(_view({b"b": b, b"a": a}))
    assert held != state_hash(_view({b"a": a, b"b": b._replace(value=b"3")}))
    assert held != state_hash(_view({b"a": a}))
