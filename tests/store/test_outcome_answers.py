"""What the HTTP API answers for a conditional write whose outcome is older than the outcome
window (kraft_spark.state.outcomes): 410 "outcome unknown", never a 200."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from api.conditional import judge
from api.models import ApiError
from kraft_spark.client.types import AppendResult
from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import FailedTxn, KeyValueState
from kraft_spark.store.txn import TXN_HEADER, Condition, encode_header


class _StateStore:
    """The part of ``KvStore`` that ``judge`` calls, answered from a state as NodeStore does
    once the state applied the write."""

    def __init__(self, state: KeyValueState) -> None:
        self.state = state

    async def outcome(self, base_offset: int, end_offset: int,
                      timeout_s: float) -> FailedTxn | None:
        assert self.state.applied_offset >= end_offset
        return self.state.txn_failure(base_offset)


def _failing_write() -> Record:
    return Record(b"k", b"x", 5, ((TXN_HEADER, encode_header(1, [Condition(b"k", version=4)])),))


def test_a_retry_past_the_window_is_answered_410_not_200() -> None:
    state = KeyValueState(outcome_window=50)
    state.apply(Batch(0, 1, (_failing_write(),)))
    store: Any = _StateStore(state)  # judge needs only outcome()
    with pytest.raises(ApiError) as conflict:
        asyncio.run(judge(store, AppendResult(0, 0, 1), 1.0))
    assert conflict.value.status == 409
    for _ in range(60):
        state.apply(Batch(state.applied_offset, 1, (Record(b"other", b"v", 5),)))
    with pytest.raises(ApiError) as gone:
        asyncio.run(judge(store, AppendResult(0, 0, 1), 1.0))
    assert gone.value.status == 410
    message = str(gone.value)
    assert "outcome unknown" in message and "outcome window of 50 offsets" in message
    assert "read the keys" in message
    # A write that applied, past the window, is not answered 200 either.
    state.apply(Batch(state.applied_offset, 1, (Record(b"k", b"y", 5),)))
    applied_at = state.applied_offset - 1
    asyncio.run(judge(store, AppendResult(applied_at, applied_at, 1), 1.0))
    for _ in range(60):
        state.apply(Batch(state.applied_offset, 1, (Record(b"other", b"v", 5),)))
    with pytest.raises(ApiError) as gone_too:
        asyncio.run(judge(store, AppendResult(applied_at, applied_at, 1), 1.0))
    assert gone_too.value.status == 410
