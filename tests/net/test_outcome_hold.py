"""The state keeper keeps outcomes for its node's materializer (``local_hold``), no lower
than the log start (kraft_spark.state.outcomes)."""

from __future__ import annotations

from pathlib import Path

from kraft_spark.log.meta import format_log_dir
from kraft_spark.net.state_keeper import StateKeeper, open_storage
from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.policy import SnapshotConfig
from kraft_spark.store.txn import TXN_HEADER, Condition, encode_header


def test_the_materializer_hold_keeps_outcomes_past_the_window(tmp_path: Path) -> None:
    log_dir = str(tmp_path / "node-0")
    format_log_dir(log_dir, cluster_id="c" * 22, node_id=0)
    storage = open_storage(log_dir, SnapshotConfig(), node_id=0, lock_timeout_s=5.0,
                           preallocate=False)
    try:
        keeper = StateKeeper(storage, SnapshotConfig(), node_id=0, now_ms=lambda: 0,
                             observer_hold=lambda: None)
        state = keeper.state
        assert state.outcome_hold is not None and state.outcome_hold() is None
        materialized = 0
        keeper.local_hold = lambda: materialized
        state.outcome_window = 8
        header = ((TXN_HEADER, encode_header(1, [Condition(b"k", version=3)])),)
        state.apply(Batch(0, 1, (Record(b"k", b"x", 5, header),)))
        for _ in range(40):
            state.apply(Batch(state.applied_offset, 1, (Record(b"p", b"v", 5),)))
        assert state.outcomes_from == 0 and 0 in state.known_outcomes(0, 41)[0]
        materialized = 30
        state.apply(Batch(state.applied_offset, 1, (Record(b"p", b"v", 5),)))
        assert state.outcomes_from == 30 and not state.failed_txns
    finally:
        storage.log.close()
        keeper.close()
