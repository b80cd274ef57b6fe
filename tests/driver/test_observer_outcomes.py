"""The materializer's reads of the observer (driver/observer_store.py, observer_bootstrap.py)
never let a failed conditional write or a lease deletion reach Delta as applied, however far
behind the window the tables are (kraft_spark.state.outcomes)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from driver.observer_bootstrap import bootstrap_if_needed
from driver.observer_store import read_committed
from kraft_spark.delta import bootstrap
from kraft_spark.delta.log_rows import rows_from
from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import KeyValueState
from kraft_spark.state.outcomes import OutcomeUnknown
from kraft_spark.store.txn import OUTCOME_HEADER, TXN_HEADER, Condition, encode_header

WINDOW = 10


class _Log:
    def __init__(self, batches: list[Batch], start: int = 0) -> None:
        self.batches = batches
        self.start = start

    def start_offset(self) -> int:
        return self.start

    def read(self, offset: int, max_bytes: int) -> list[Batch]:
        return [b for b in self.batches if b.next_offset > offset]


def _observer(hold: int | None) -> tuple[Any, list[Batch]]:
    """An observer whose state applied a failed conditional write at 0, then 30 writes."""
    state = KeyValueState(outcome_window=WINDOW)
    if hold is not None:
        state.outcome_hold = lambda: hold
    header = ((TXN_HEADER, encode_header(1, [Condition(b"k", version=7)])),)
    batches = [Batch(0, 1, (Record(b"k", b"lost", 5, header),))]
    for i in range(30):
        batches.append(Batch(1 + i, 1, (Record(b"p", b"%d" % i, 5),)))
    state.apply_all(batches)
    node = SimpleNamespace(keeper=SimpleNamespace(state=state), high_watermark=31,
                           log=_Log(batches))
    return node, batches


def test_a_materializer_behind_the_window_reads_true_outcomes_when_held() -> None:
    node, _ = _observer(hold=0)
    batches, hw, failed, deleted = asyncio.run(read_committed(node, 0, 1000))
    assert hw == 31 and 0 in failed
    rows = rows_from(batches, 0, failed, deleted)
    assert rows.records[0][5][OUTCOME_HEADER] == "failed"
    assert "k" not in rows.latest  # the failed write changes nothing in snapshot


def test_a_materializer_behind_unheld_outcomes_is_refused_not_wrong() -> None:
    """Before the fix this returned failed = {} for the pruned failure: the row of the failed
    write went to Delta as applied, and k = "lost" into the snapshot table."""
    node, _ = _observer(hold=None)
    with pytest.raises(OutcomeUnknown, match="offset 0"):
        asyncio.run(read_committed(node, 0, 1000))
    # From where the state knows every outcome on, it reads.
    start = node.keeper.state.outcomes_from
    batches, _, failed, _ = asyncio.run(read_committed(node, start, 1000))
    assert batches and not failed


class _Materializer:
    def __init__(self, resume: int) -> None:
        self.resume = resume

    def resume_offset(self) -> int:
        return self.resume


def test_unknown_outcomes_bootstrap_the_tables_from_a_snapshot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    node, _ = _observer(hold=None)
    known_from = node.keeper.state.outcomes_from
    assert known_from > 0
    sid = SimpleNamespace(offset=31, epoch=1)
    node.keeper.store = SimpleNamespace(latest_id=lambda: sid,
                                        load=lambda _: SimpleNamespace(entries=[]))
    moved: list[Any] = []
    monkeypatch.setattr(bootstrap, "bootstrap_from_snapshot",
                        lambda m, s, entries, hw: moved.append((s.offset, hw)))
    messages: list[str] = []
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        assert not bootstrap_if_needed(node, loop, _Materializer(known_from), known_from,
                                       messages.append)
        assert bootstrap_if_needed(node, loop, _Materializer(0), 0, messages.append)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
    assert moved == [(31, 31)]
    assert "outcomes of conditional writes" in messages[0]
