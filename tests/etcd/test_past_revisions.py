"""etcd's Range at a past revision (``kraft_spark.etcd.kv.at_revision``) over a state and its
MVCC history fed as a node feeds them: every option reads the state as it was, a Txn's range
too; below the history's oldest revision ``ErrCompacted``, above the current ``ErrFutureRev``."""

from __future__ import annotations

import pytest

from kraft_spark.etcd import errors
from kraft_spark.etcd.kv import View, range_response
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.etcd.plan import Plan
from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import KeyValueState
from kraft_spark.store.history import History
from kraft_spark.store.history_feed import compact_header, feed_batch

RangeRequest = rpc_pb2.RangeRequest


def _node() -> tuple[KeyValueState, History]:
    state = KeyValueState(applied_offset=1)
    history = History(1000)
    history.reset(state.items(), state.applied_offset)
    batches = [
        (Record(b"a", b"1"), Record(b"b", b"1"), Record(b"c", b"1")),  # 1..3
        (Record(b"a", b"2"),),  # 4
        (Record(b"b", None),),  # 5
        (Record(b"d", b"9"), Record(b"a", b"3")),  # 6, 7
    ]
    for records in batches:
        batch = Batch(state.applied_offset, 1, records)
        state.apply(batch)
        feed_batch(history, batch, lambda _o: 0, state.leases.deleted_at)
    return state, history


def _view(state: KeyValueState, history: History) -> View:
    return View(state.get, state.items, state.applied_offset, history)


def _kvs(response: rpc_pb2.RangeResponse) -> list[tuple[bytes, bytes, int, int, int]]:
    return [(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version)
            for kv in response.kvs]


def test_every_option_reads_the_state_as_it_was() -> None:
    view = _view(*_node())
    assert view.revision == 7
    everything = RangeRequest(key=b"\0", range_end=b"\0", revision=4)
    assert _kvs(range_response(view, everything)) == [
        (b"a", b"2", 1, 4, 2), (b"b", b"1", 2, 2, 1), (b"c", b"1", 3, 3, 1)]
    at5 = range_response(view, RangeRequest(key=b"a", range_end=b"z", revision=5, limit=1,
                                            sort_order=RangeRequest.DESCEND,
                                            sort_target=RangeRequest.MOD))
    assert _kvs(at5) == [(b"a", b"2", 1, 4, 2)] and at5.more and at5.count == 2
    counted = range_response(view, RangeRequest(key=b"a", range_end=b"z", revision=3,
                                                count_only=True))
    assert counted.count == 3 and not counted.kvs
    recent = range_response(view, RangeRequest(key=b"a", range_end=b"z", revision=6,
                                               min_mod_revision=4, keys_only=True))
    assert [(kv.key, kv.value) for kv in recent.kvs] == [(b"a", b""), (b"d", b"")]
    assert not range_response(view, RangeRequest(key=b"d", revision=5)).kvs
    assert _kvs(range_response(view, RangeRequest(key=b"a", revision=7))) == [
        (b"a", b"3", 1, 7, 3)]


def test_compacted_and_future_revisions_are_etcds_errors() -> None:
    state, history = _node()
    view = _view(state, history)
    with pytest.raises(errors.EtcdError, match="future revision"):
        range_response(view, RangeRequest(key=b"a", revision=8))
    batch = Batch(state.applied_offset, 1, (Record(None, None, headers=(compact_header(5),)),))
    state.apply(batch)
    feed_batch(history, batch, lambda _o: 0, state.leases.deleted_at)
    view = _view(state, history)
    assert history.compacted == 5
    with pytest.raises(errors.EtcdError, match="required revision has been compacted") as err:
        range_response(view, RangeRequest(key=b"a", revision=4))
    assert err.value.code == "OUT_OF_RANGE"
    assert _kvs(range_response(view, RangeRequest(key=b"a", revision=5))) == [
        (b"a", b"2", 1, 4, 2)]
    # A view without a history in step answers compacted rather than a wrong state.
    with pytest.raises(errors.EtcdError, match="compacted"):
        range_response(View(state.get, state.items, state.applied_offset),
                       RangeRequest(key=b"a", revision=5))


def test_a_txns_range_at_a_past_revision_reads_the_history() -> None:
    plan = Plan(_view(*_node()))
    response = plan.txn(rpc_pb2.TxnRequest(success=[
        rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"a", value=b"new")),
        rpc_pb2.RequestOp(request_range=RangeRequest(key=b"a", revision=4))]))
    assert _kvs(response.responses[1].response_range) == [(b"a", b"2", 1, 4, 2)]
