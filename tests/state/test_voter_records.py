"""KIP-853's records and the voter history along the log."""

from __future__ import annotations

import uuid

import pytest

from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch, Record
from kraft_spark.raft.voter_history import VoterHistory
from kraft_spark.raft.voter_records import (
    decode_kraft_version,
    decode_voters,
    encode_kraft_version,
    encode_voters,
    voters_batch,
    voters_in,
)
from kraft_spark.raft.voter_set import (
    Endpoint,
    Voter,
    VoterSet,
    directory_text,
    parse_directory,
)
from kraft_spark.state.machine import KeyValueState
from kraft_spark.state.snapshot_file import decode_snapshot, encode_snapshot

SET = VoterSet((
    Voter(2, uuid.UUID(int=2), (Endpoint("CONTROLLER", "h2", 9002),)),
    Voter(1, uuid.UUID(int=1), (Endpoint("CONTROLLER", "h1", 9001), Endpoint("X", "::1", 1))),
))


def test_voters_record_round_trips_and_sorts_by_id() -> None:
    assert SET.ids() == (1, 2)
    assert decode_voters(encode_voters(SET)) == SET
    assert decode_kraft_version(encode_kraft_version(1)) == 1


def test_malformed_voters_records_are_refused_with_the_reason() -> None:
    raw = encode_voters(SET)
    with pytest.raises(ValueError, match="truncated VotersRecord"):
        decode_voters(raw[:-5])
    with pytest.raises(ValueError, match="trailing"):
        decode_voters(raw + b"\x00")
    with pytest.raises(ValueError, match="duplicate"):
        VoterSet((Voter(1), Voter(1)))
    with pytest.raises(ValueError, match="empty"):
        SET.without(1).without(2)


def test_directory_ids_use_kafkas_text_form() -> None:
    d = uuid.uuid4()
    assert len(directory_text(d)) == 22
    assert parse_directory(directory_text(d)) == d
    assert parse_directory(str(d)) == d
    with pytest.raises(ValueError, match="22-character"):
        parse_directory("nope")


def test_the_newest_record_is_in_force_committed_or_not_and_truncation_reverts_it() -> None:
    history = VoterHistory(VoterSet.of_ids((1, 2, 3)))
    assert not history.dynamic and history.latest().ids() == (1, 2, 3)
    data = Batch(0, 1, (Record(b"k", b"v"),))
    assert not history.on_batch(data)
    assert history.on_batch(voters_batch(5, 1, SET, 0))
    four = SET.with_voter(Voter(4, uuid.UUID(int=4)))
    assert history.on_batch(voters_batch(9, 2, four, 0))
    assert history.latest() == four and history.latest_offset() == 9
    assert history.at(9) == SET and history.at(10) == four and history.at(3).ids() == (1, 2, 3)
    assert history.truncate(9) and history.latest() == SET
    assert not history.truncate(20)
    history.reset(four)
    assert history.latest() == four and history.latest_offset() == -1 and history.dynamic


def test_snapshots_carry_the_voter_set_applied_last() -> None:
    state = KeyValueState()
    state.apply(Batch(0, 1, (Record(b"k", b"v"),)))
    state.apply(voters_batch(1, 1, SET, 0))
    assert state.voters is not None
    sid = OffsetAndEpoch(2, 1)
    data = b"".join(encode_snapshot(sid, state.items(), b"", 0, state.voters))
    content = decode_snapshot(data, sid, "test")
    assert content.voters is not None and decode_voters(content.voters) == SET
    assert [k for k, _ in content.entries] == [b"k"]
    batch = voters_batch(0, 1, SET, 0)
    assert voters_in(batch) == SET and voters_in(Batch(0, 1, (Record(b"k", b"v"),))) is None


def test_quorum_events_get_a_row_for_every_voter_set_change() -> None:
    from kraft_spark.delta.log_rows import rows_from
    from kraft_spark.raft.records import LeaderChange, leader_change_batch
    from kraft_spark.raft.voter_records import kraft_version_batch

    batches = [
        leader_change_batch(0, 1, LeaderChange(1, (1, 2), (1,)), 10),
        kraft_version_batch(1, 1, 1, 11),
        voters_batch(2, 1, SET, 12),
        Batch(3, 1, (Record(b"k", b"v", 13),)),
    ]
    rows = rows_from(batches, 0)
    dirs = [directory_text(v.directory_id) for v in SET.voters]
    assert rows.events == [(0, 1, 1, [1, 2], [1], 10, None, None),
                           (2, 1, -1, [1, 2], [], 12, dirs, None)]
    assert [r[0] for r in rows.records] == [3]
