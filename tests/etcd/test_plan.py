"""etcd's Range, Compare and write plans over a state (``kraft_spark.etcd``), pure."""

from __future__ import annotations

import pytest

from kraft_spark.etcd import errors
from kraft_spark.etcd.kv import View, range_response
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.etcd.plan import Plan, Write
from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import KeyValueState

Compare = rpc_pb2.Compare


def _state() -> KeyValueState:
    state = KeyValueState(applied_offset=1)  # offset 0: the first leader's control record
    state.apply(Batch(1, 1, (Record(b"a", b"3", 5), Record(b"b", b"1", 5),
                             Record(b"c", b"2", 5), Record(b"a", b"4", 5))))
    return state


def _view(state: KeyValueState) -> View:
    return View(state.get, state.items, state.applied_offset)


def _keys(response: rpc_pb2.RangeResponse) -> list[bytes]:
    return [kv.key for kv in response.kvs]


def test_range_selection_sort_limit_count() -> None:
    view = _view(_state())
    assert view.revision == 4
    every = range_response(view, rpc_pb2.RangeRequest(key=b"\0", range_end=b"\0"))
    assert _keys(every) == [b"a", b"b", b"c"] and every.count == 3
    a = every.kvs[0]
    assert (a.create_revision, a.mod_revision, a.version, a.value) == (1, 4, 2, b"4")
    limited = range_response(view, rpc_pb2.RangeRequest(key=b"a", range_end=b"c", limit=1))
    assert _keys(limited) == [b"a"] and limited.more and limited.count == 2
    by_value = range_response(view, rpc_pb2.RangeRequest(
        key=b"a", range_end=b"\0", sort_order=rpc_pb2.RangeRequest.DESCEND,
        sort_target=rpc_pb2.RangeRequest.VALUE))
    assert _keys(by_value) == [b"a", b"c", b"b"]
    counted = range_response(view, rpc_pb2.RangeRequest(key=b"a", range_end=b"\0",
                                                        count_only=True))
    assert counted.count == 3 and not counted.kvs
    keys_only = range_response(view, rpc_pb2.RangeRequest(key=b"b", keys_only=True))
    assert keys_only.kvs[0].value == b"" and keys_only.kvs[0].key == b"b"
    recent = range_response(view, rpc_pb2.RangeRequest(key=b"a", range_end=b"\0",
                                                       min_mod_revision=3))
    assert _keys(recent) == [b"a", b"c"] and recent.count == 3


def test_only_the_current_revision_is_kept() -> None:
    view = _view(_state())
    assert range_response(view, rpc_pb2.RangeRequest(key=b"a", revision=4)).kvs
    with pytest.raises(errors.EtcdError, match="compacted"):
        range_response(view, rpc_pb2.RangeRequest(key=b"a", revision=3))
    with pytest.raises(errors.EtcdError, match="future"):
        range_response(view, rpc_pb2.RangeRequest(key=b"a", revision=5))


def test_txn_picks_its_branch_and_guards_what_it_read() -> None:
    plan = Plan(_view(_state()))
    request = rpc_pb2.TxnRequest(
        compare=[Compare(key=b"a", target=Compare.VALUE, result=Compare.GREATER, value=b"3"),
                 Compare(key=b"zz", target=Compare.VERSION, result=Compare.EQUAL, version=0)],
        success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"x", value=b"1")),
                 rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(
                     key=b"b", range_end=b"d", prev_kv=True))],
        failure=[rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=b"a"))])
    response = plan.txn(request)
    assert response.succeeded
    assert plan.writes == [Write(b"x", b"1"), Write(b"b", None), Write(b"c", None)]
    deleted = response.responses[1].response_delete_range
    assert deleted.deleted == 2 and [kv.key for kv in deleted.prev_kvs] == [b"b", b"c"]
    guards = {(c.key, c.range_end): c for c in plan.conditions}
    assert guards[(b"a", b"")].mod_offset == 4
    assert guards[(b"zz", b"")].exists is False
    assert (guards[(b"b", b"d")].since, guards[(b"b", b"d")].count) == (5, 2)


def test_failure_branch_reads_and_value_compares_on_absent_keys() -> None:
    plan = Plan(_view(_state()))
    response = plan.txn(rpc_pb2.TxnRequest(
        compare=[Compare(key=b"nope", target=Compare.VALUE, result=Compare.NOT_EQUAL,
                         value=b"x")],
        failure=[rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=b"a"))]))
    assert not response.succeeded and not plan.writes
    assert response.responses[0].response_range.kvs[0].value == b"4"


def test_compares_on_lease_create_and_mod_over_a_range() -> None:
    view = _view(_state())
    plan = Plan(view)

    def holds(**fields: object) -> bool:
        return plan.txn(rpc_pb2.TxnRequest(compare=[Compare(**fields)])).succeeded

    assert holds(key=b"a", target=Compare.LEASE, result=Compare.EQUAL, lease=0)
    assert not holds(key=b"a", target=Compare.LEASE, result=Compare.GREATER, lease=0)
    # Over a range: every key must satisfy it (create revisions 1, 2, 3).
    assert holds(key=b"a", range_end=b"\0", target=Compare.CREATE, result=Compare.LESS,
                 create_revision=4)
    assert not holds(key=b"a", range_end=b"\0", target=Compare.MOD, result=Compare.LESS,
                     mod_revision=4)
    assert holds(key=b"a", target=Compare.MOD, result=Compare.EQUAL, mod_revision=4)


def test_put_options_and_duplicate_keys() -> None:
    plan = Plan(_view(_state()))
    put = plan.put(rpc_pb2.PutRequest(key=b"a", ignore_value=True, prev_kv=True))
    assert put.prev_kv.value == b"4" and plan.writes == [Write(b"a", b"4")]
    with pytest.raises(errors.EtcdError, match="duplicate key"):
        plan.put(rpc_pb2.PutRequest(key=b"a", value=b"5"))
    with pytest.raises(errors.EtcdError, match="key not found"):
        Plan(_view(_state())).put(rpc_pb2.PutRequest(key=b"new", ignore_lease=True))


def test_a_txn_reads_its_own_writes_settled_where_they_land() -> None:
    """etcd's lock recipe: put my key, then read the prefix's first creator, in one Txn."""
    plan = Plan(_view(_state()))  # applied offset 5
    response = plan.txn(rpc_pb2.TxnRequest(
        compare=[Compare(key=b"l/me", target=Compare.CREATE, result=Compare.EQUAL,
                         create_revision=0)],
        success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"l/me", value=b"")),
                 rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(
                     key=b"l/", range_end=b"l0", limit=1,
                     sort_target=rpc_pb2.RangeRequest.CREATE))]))
    plan.settle(response, 9)  # the group landed at offset 9
    owner = response.responses[1].response_range.kvs[0]
    assert (owner.key, owner.create_revision, owner.mod_revision, owner.version) == (
        b"l/me", 9, 9, 1)
    assert [(c.key, c.exists) for c in plan.conditions] == [(b"l/me", False),
                                                            (b"l/", None)]


def test_a_range_inside_a_txn_has_a_header_with_its_revision() -> None:
    """clientv3's STM reads through a Txn and takes the nested RangeResponse's
    ``header.revision`` as its snapshot (a missing header crashed it with a nil pointer)."""
    get = rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=b"a"))
    plan = Plan(_view(_state()))  # applied offset 5: revision 4
    response = plan.txn(rpc_pb2.TxnRequest(success=[get]))
    assert response.responses[0].response_range.HasField("header")
    assert response.responses[0].response_range.header.revision == 4
    # After the Txn's own write: that write's revision, once settled where the group landed.
    plan = Plan(_view(_state()))
    put = rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"z", value=b"1"))
    response = plan.txn(rpc_pb2.TxnRequest(success=[get, put, get]))
    plan.settle(response, 9)
    assert response.responses[0].response_range.header.revision == 4
    assert response.responses[2].response_range.header.revision == 9


def test_a_txns_writes_read_inside_it_share_the_revision_the_group_lands_at() -> None:
    """etcd gives every write of one Txn one revision: read back inside the Txn, two puts
    have it (the group's first offset once settled), and so does the Range's header."""
    put = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=b"v"))
           for k in (b"t/1", b"t/2")]
    get = rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=b"t/", range_end=b"t0"))
    plan = Plan(_view(_state()))
    response = plan.txn(rpc_pb2.TxnRequest(success=[*put, get]))
    plan.settle(response, 9)  # the group landed at offsets 9 and 10
    read = response.responses[2].response_range
    assert [(kv.key, kv.create_revision, kv.mod_revision) for kv in read.kvs] == [
        (b"t/1", 9, 9), (b"t/2", 9, 9)]
    assert read.header.revision == 9
    # etcd's nested headers: a put's is the Txn's revision, so is a delete's after a write,
    # a delete that finds nothing before any write reads the view's.
    assert [op.response_put.header.revision for op in response.responses[:2]] == [9, 9]
    nothing = rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=b"none"))
    plan = Plan(_view(_state()))  # applied offset 5: revision 4
    response = plan.txn(rpc_pb2.TxnRequest(success=[nothing, put[0], nothing]))
    plan.settle(response, 9)
    assert [op.WhichOneof("response") for op in response.responses] == [
        "response_delete_range", "response_put", "response_delete_range"]
    assert [getattr(op, op.WhichOneof("response")).header.revision
            for op in response.responses] == [4, 9, 9]
