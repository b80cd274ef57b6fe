"""The watch checker on a small committed log, without the simulator: a lease with three keys
revoked at one offset (three events there), a failed compare-and-set (no event), and the
streams that must pass and those that must fail (a gap inside an offset, a repeat, a write that
did not take effect, a wrong reload, a resume point that skips what the node still serves)."""

from __future__ import annotations

import pytest

from kraft_spark.raft.records import Batch, Record
from kraft_spark.sim.invariants import InvariantViolation
from kraft_spark.sim.replay import CommittedReplay
from kraft_spark.sim.watch_check import CommittedHistory, StreamCheck
from kraft_spark.store.leases import LEASE_HEADER, LEASE_OP_HEADER, encode_op
from kraft_spark.store.txn import TXN_HEADER, Condition, encode_header
from kraft_spark.store.watch import WatchEvent

LEASE = (LEASE_HEADER, b"7")
KEYS = (b"s/a", b"s/b", b"s/c")


def committed() -> list[Batch]:
    """0: grant lease 7; 1-3: s/a, s/b, s/c on it; 4: a cas on s/a expecting version 5 (fails);
    5: x; 6: the revoke (deletes s/a, s/b, s/c); 7: s/d."""
    grant = Record(None, None, 0, ((LEASE_OP_HEADER, encode_op("grant", 7, ttl_ms=6000)),))
    cas = Record(b"s/a", b"no", 0, ((TXN_HEADER, encode_header(1, [Condition(b"s/a",
                                                                                version=5)])),))
    revoke = Record(None, None, 0, ((LEASE_OP_HEADER, encode_op("revoke", 7)),))
    return [Batch(0, 1, (grant,)), Batch(1, 1, tuple(Record(k, b"1", 0, (LEASE,)) for k in KEYS)),
            Batch(4, 1, (cas, Record(b"x", b"2"))), Batch(6, 1, (revoke,)),
            Batch(7, 1, (Record(b"s/d", b"3"),))]


def check(prefix: bytes = b"s/") -> StreamCheck:
    batches = committed()
    return StreamCheck("client", lambda k: k.startswith(prefix), CommittedHistory(batches),
                       CommittedReplay(batches))


DELETES = [WatchEvent(6, k, None, i, i == 2) for i, k in enumerate(KEYS)]
PUTS = [WatchEvent(1 + i, k, b"1") for i, k in enumerate(KEYS)]


def test_the_whole_history_passes_and_the_failed_write_is_not_in_it() -> None:
    stream = check()
    stream.loaded(0, {})
    for event in [*PUTS, *DELETES, WatchEvent(7, b"s/d", b"3")]:
        stream.event(event)
    stream.progress((8, 0))
    assert stream.cursor == (8, 0)


def test_a_resume_between_the_events_of_one_offset_goes_on_with_the_rest() -> None:
    stream = check()
    stream.loaded(4, dict.fromkeys(KEYS, b"1"))
    stream.event(DELETES[0])
    assert stream.cursor == (6, 1)
    assert stream.cancelled((6, 1), served_from=0) is False  # a cut-off: resume here
    stream.event(DELETES[1])
    stream.event(DELETES[2])


@pytest.mark.parametrize("stream_events", [
    [DELETES[0], DELETES[2]],  # the second delete of the offset dropped
    [DELETES[0], DELETES[0]],  # repeated
    [WatchEvent(4, b"s/a", b"no")],  # the failed compare-and-set
    [WatchEvent(7, b"s/d", b"3")],  # the whole offset 6 skipped
])
def test_a_wrong_stream_is_a_watch_stream_violation(stream_events: list[WatchEvent]) -> None:
    stream = check()
    stream.loaded(4, dict.fromkeys(KEYS, b"1"))
    with pytest.raises(InvariantViolation) as caught:
        for event in stream_events:
            stream.event(event)
    assert caught.value.invariant == "watch-stream"


def test_a_progress_past_a_missed_event_is_caught() -> None:
    stream = check()
    stream.loaded(4, dict.fromkeys(KEYS, b"1"))
    stream.event(DELETES[0])
    with pytest.raises(InvariantViolation, match="missed 2"):
        stream.progress((7, 0))


def test_a_reload_must_be_the_replayed_state() -> None:
    stream = check()
    stream.loaded(7, {})  # everything under s/ deleted by the revoke below offset 7
    with pytest.raises(InvariantViolation) as caught:
        check().loaded(7, {b"s/a": b"1"})
    assert caught.value.invariant == "watch-reload"


def test_a_resume_point_past_the_cursor_only_when_the_node_no_longer_serves_it() -> None:
    stream = check()
    stream.loaded(4, dict.fromkeys(KEYS, b"1"))
    assert stream.cancelled((7, 0), served_from=7) is True  # a snapshot at 7: load it
    with pytest.raises(InvariantViolation) as caught:
        stream.cancelled((7, 0), served_from=0)
    assert caught.value.invariant == "watch-resume-point"
