"""A warehouse restore (kraft_spark/warehouse/restore.py) carries the outcome window over:
the restored snapshot says where its outcomes start, and a voter that loads it answers every
outcome query as one that loaded the stored snapshot and applied the same records."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import TXN_OUTCOME_WINDOW, FailedTxn, KeyValueState
from kraft_spark.state.outcomes import OutcomeUnknown
from kraft_spark.state.snapshot_file import SnapshotContent, SnapshotId, decode_snapshot
from kraft_spark.store.txn import OUTCOME_HEADER, TXN_HEADER, Condition, Failure, encode_header
from kraft_spark.warehouse import restore, table_reads
from kraft_spark.warehouse.restore_plan import RestorePlan
from kraft_spark.warehouse.table_reads import RecordRow

S = 2 * TXN_OUTCOME_WINDOW + 10  # the stored snapshot's end offset
OLD_FAILURE = S - TXN_OUTCOME_WINDOW // 2


def _answer(state: KeyValueState, offset: int) -> Any:
    try:
        return state.txn_failure(offset)
    except OutcomeUnknown:
        return "unknown"


def test_the_restored_snapshot_answers_outcomes_as_the_quorum_did(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stored = SnapshotContent(
        SnapshotId(S, 3), [], b"", 0,
        failed_txns={OLD_FAILURE: FailedTxn(1, (Failure(b"k", 0, 0),))},
        outcomes_from=S - TXN_OUTCOME_WINDOW)
    header = encode_header(2, [Condition(b"k", version=9)])
    rows = [RecordRow(S, 3, 0, "k", "1", {}),
            RecordRow(S + 1, 3, 0, "k", "2", {TXN_HEADER: header.decode(),
                                               OUTCOME_HEADER: "failed"}),
            RecordRow(S + 2, 3, 0, "j", "2", {}),
            RecordRow(S + 3, 3, 0, "k", "3", {})]

    def record_rows(spark: Any, path: str, start: int, end: int) -> Iterator[RecordRow]:
        return iter([r for r in rows if start <= r.offset < end])

    monkeypatch.setattr(restore, "load", lambda files, sid: stored)
    monkeypatch.setattr(table_reads, "record_rows", record_rows)
    monkeypatch.setattr(table_reads, "newest_leader_epoch", lambda spark, path, end: 0)
    end = S + 4
    built = restore.build_restore(None, "/nonexistent-warehouse",
                                  RestorePlan(SnapshotId(S, 3), S, end, end))
    content = decode_snapshot(built.data, built.snapshot_id, "restored")
    assert content.outcomes_from == end - TXN_OUTCOME_WINDOW
    restored = KeyValueState()
    restored.load(content.entries, end, built.snapshot_id.epoch, b"",
                  failed_txns=content.failed_txns, leases=content.leases,
                  outcomes_from=content.outcomes_from)
    # The quorum's own replica: the stored snapshot, then the same records as batches.
    replica = KeyValueState()
    replica.load([], S, 3, b"", failed_txns=stored.failed_txns, outcomes_from=stored.outcomes_from)
    replica.apply(Batch(S, 3, (Record(b"k", b"1", 0),)))
    replica.apply(Batch(S + 1, 3, (Record(b"k", b"2", 0, ((TXN_HEADER, header),)),
                                   Record(b"j", b"2", 0))))
    replica.apply(Batch(S + 3, 3, (Record(b"k", b"3", 0),)))
    assert restored.view() == replica.view() == {b"k": b"3"}
    for offset in (S - TXN_OUTCOME_WINDOW, end - TXN_OUTCOME_WINDOW - 1,
                   end - TXN_OUTCOME_WINDOW, OLD_FAILURE, S, S + 1, S + 2, S + 3):
        assert _answer(restored, offset) == _answer(replica, offset), offset
    assert _answer(restored, end - TXN_OUTCOME_WINDOW - 1) == "unknown"
    assert _answer(restored, OLD_FAILURE) is not None and _answer(restored, S + 1) is not None
