"""The DescribeQuorum report (docs/concepts/protocol.md): expectations computed by hand."""

from __future__ import annotations

from kraft_spark.client.types import QuorumInfo, ReplicaInfo
from kraft_spark.quorum_report import (
    format_replication,
    format_status,
    replication_rows,
    status_summary,
)

T = 1_700_000_000_000


def spec_quorum() -> QuorumInfo:
    """A replication example: leader 0, follower 1, observer 3000."""
    return QuorumInfo(
        cluster_id="abc",
        leader_id=0,
        leader_epoch=15,
        high_watermark=234130,
        voters=(
            ReplicaInfo(0, 234134, T, T),
            ReplicaInfo(1, 234130, T - 10, T - 15),
        ),
        observers=(ReplicaInfo(3000, 234124, T - 12, T - 50),),
    )


def test_replication_text_matches_the_spec_layout() -> None:
    text = format_replication(replication_rows(spec_quorum()), human_readable=False, now_ms=T)
    assert text == (
        "NodeId  DirectoryId             LogEndOffset  Lag  LastFetchTimestamp  "
        "LastCaughtUpTimestamp  Status\n"
        "0       AAAAAAAAAAAAAAAAAAAAAA  234134        0    1700000000000       "
        "1700000000000          Leader\n"
        "1       AAAAAAAAAAAAAAAAAAAAAA  234130        4    1699999999990       "
        "1699999999985          Follower\n"
        "3000    AAAAAAAAAAAAAAAAAAAAAA  234124        10   1699999999988       "
        "1699999999950          Observer"
    )


def test_status_text_matches_the_spec_layout() -> None:
    summary = {
        "clusterId": "<id>",
        "leaderId": 0,
        "leaderEpoch": 15,
        "highWatermark": 234130,
        "maxFollowerLag": 34,
        "maxFollowerLagTimeMs": 15,
        "currentVoters": [
            {"id": 0, "directoryId": "AAAAAAAAAAAAAAAAAAAAAQ", "endpoints": ["CONTROLLER://h:1"]},
            {"id": 1, "directoryId": None},
            {"id": 2, "directoryId": None, "endpoints": ["A://h:2", "B://h:3"]},
        ],
        "currentObservers": [{"id": 3000, "directoryId": None}],
    }
    assert format_status(summary) == (
        "ClusterId:              <id>\n"
        "LeaderId:               0\n"
        "LeaderEpoch:            15\n"
        "HighWatermark:          234130\n"
        "MaxFollowerLag:         34\n"
        "MaxFollowerLagTimeMs:   15\n"
        'CurrentVoters:          [{"id": 0, "directoryId": "AAAAAAAAAAAAAAAAAAAAAQ", '
        '"endpoints": ["CONTROLLER://h:1"]}, {"id": 1}, '
        '{"id": 2, "endpoints": ["A://h:2", "B://h:3"]}]\n'
        'CurrentObservers:       [{"id": 3000}]'
    )


def test_status_summary_of_the_spec_example() -> None:
    # Lowest voter end is voter 1 at 234130: lag 234134 - 234130 = 4, time T - (T - 15) = 15.
    assert status_summary(spec_quorum()) == {
        "clusterId": "abc",
        "leaderId": 0,
        "leaderEpoch": 15,
        "highWatermark": 234130,
        "maxFollowerLag": 4,
        "maxFollowerLagTimeMs": 15,
        "currentVoters": [{"id": 0, "directoryId": None}, {"id": 1, "directoryId": None}],
        "currentObservers": [{"id": 3000, "directoryId": None}],
    }


def test_observers_do_not_count_towards_follower_lag() -> None:
    info = QuorumInfo(
        "c", 2, 3, 100,
        voters=(
            ReplicaInfo(1, 95, T, T - 40), ReplicaInfo(2, 100, T, T), ReplicaInfo(3, 90, T, T - 7)
        ),
        observers=(ReplicaInfo(9, 0, -1, -1),),
    )
    summary = status_summary(info)
    # Voter 3 is the lowest (90): lag 100 - 90 = 10; time T - (T - 7) = 7 (not voter 1's 40).
    assert summary["maxFollowerLag"] == 10
    assert summary["maxFollowerLagTimeMs"] == 7
    assert [v["id"] for v in summary["currentVoters"]] == [1, 2, 3]
    assert summary["currentObservers"] == [{"id": 9, "directoryId": None}]


def test_lag_time_is_zero_when_the_leader_is_the_lowest_voter() -> None:
    # All voters at the leader's end offset: the lowest voter is (tied with) the leader.
    info = QuorumInfo(
        "c", 1, 1, 50, voters=(ReplicaInfo(0, 50, T, -1), ReplicaInfo(1, 50, T, T))
    )
    summary = status_summary(info)
    assert summary["maxFollowerLag"] == 0
    assert summary["maxFollowerLagTimeMs"] == 0


def test_lag_time_is_unknown_when_the_lowest_voter_never_caught_up() -> None:
    info = QuorumInfo(
        "c", 0, 1, 50, voters=(ReplicaInfo(0, 50, T, T), ReplicaInfo(1, 20, -1, -1))
    )
    summary = status_summary(info)
    assert summary["maxFollowerLag"] == 30
    assert summary["maxFollowerLagTimeMs"] == -1


def test_lag_time_is_unknown_when_the_leader_timestamp_is_unknown() -> None:
    info = QuorumInfo(
        "c", 0, 1, 50, voters=(ReplicaInfo(0, 50, -1, -1), ReplicaInfo(1, 20, T, T - 5))
    )
    assert status_summary(info)["maxFollowerLagTimeMs"] == -1


def test_tied_lowest_voters_report_the_oldest_catch_up_or_unknown() -> None:
    known = QuorumInfo(
        "c", 0, 1, 50,
        voters=(
            ReplicaInfo(0, 50, T, T), ReplicaInfo(1, 20, T, T - 5), ReplicaInfo(2, 20, T, T - 9)
        ),
    )
    assert status_summary(known)["maxFollowerLagTimeMs"] == 9
    one_unknown = QuorumInfo(
        "c", 0, 1, 50,
        voters=(ReplicaInfo(0, 50, T, T), ReplicaInfo(1, 20, T, T - 5), ReplicaInfo(2, 20, T, -1)),
    )
    assert status_summary(one_unknown)["maxFollowerLagTimeMs"] == -1


def test_no_known_leader_gives_unknown_lags_and_no_leader_row() -> None:
    info = QuorumInfo(
        "c", -1, 4, 10,
        voters=(ReplicaInfo(0, 10, T, T), ReplicaInfo(1, 8)),
        observers=(ReplicaInfo(7, 3),),
    )
    summary = status_summary(info)
    assert summary["leaderId"] == -1
    assert summary["maxFollowerLag"] == -1
    assert summary["maxFollowerLagTimeMs"] == -1
    rows = replication_rows(info)
    assert [(r["nodeId"], r["lag"], r["status"]) for r in rows] == [
        (0, -1, "Follower"),
        (1, -1, "Follower"),
        (7, -1, "Observer"),
    ]


def test_rows_put_the_leader_first_then_voters_then_observers() -> None:
    info = QuorumInfo(
        "c", 2, 7, 100,
        voters=(ReplicaInfo(0, 98, T - 3, T - 20), ReplicaInfo(1, -1), ReplicaInfo(2, 100, T, T)),
        observers=(ReplicaInfo(3001, 60, T - 1, -1), ReplicaInfo(3000, 100, T - 2, T - 2)),
    )
    assert replication_rows(info) == [
        {"nodeId": 2, "directoryId": None,
         "logEndOffset": 100, "lag": 0, "lastFetchTimestamp": T,
         "lastCaughtUpTimestamp": T, "status": "Leader"},
        {"nodeId": 0, "directoryId": None,
         "logEndOffset": 98, "lag": 2, "lastFetchTimestamp": T - 3,
         "lastCaughtUpTimestamp": T - 20, "status": "Follower"},
        {"nodeId": 1, "directoryId": None,
         "logEndOffset": -1, "lag": 101, "lastFetchTimestamp": -1,
         "lastCaughtUpTimestamp": -1, "status": "Follower"},
        {"nodeId": 3001, "directoryId": None,
         "logEndOffset": 60, "lag": 40, "lastFetchTimestamp": T - 1,
         "lastCaughtUpTimestamp": -1, "status": "Observer"},
        {"nodeId": 3000, "directoryId": None,
         "logEndOffset": 100, "lag": 0, "lastFetchTimestamp": T - 2,
         "lastCaughtUpTimestamp": T - 2, "status": "Observer"},
    ]


def test_human_readable_timestamps_are_relative_and_unknown_stays_minus_one() -> None:
    info = QuorumInfo(
        "c", 0, 1, 10,
        voters=(ReplicaInfo(0, 10, T, T), ReplicaInfo(1, 9, T - 1234, -1)),
        observers=(ReplicaInfo(5, 10, T + 3, T + 3),),  # reported ahead of our clock
    )
    text = format_replication(replication_rows(info), human_readable=True, now_ms=T)
    assert text == (
        "NodeId  DirectoryId             LogEndOffset  Lag  LastFetchTimestamp  "
        "LastCaughtUpTimestamp  Status\n"
        "0       AAAAAAAAAAAAAAAAAAAAAA  10            0    0 ms ago            "
        "0 ms ago               Leader\n"
        "1       AAAAAAAAAAAAAAAAAAAAAA  9             1    1234 ms ago         "
        "-1                     Follower\n"
        "5       AAAAAAAAAAAAAAAAAAAAAA  10            0    0 ms ago            "
        "0 ms ago               Observer"
    )


def test_empty_quorum_renders_headers_only() -> None:
    info = QuorumInfo("c", -1, 0, 0)
    assert replication_rows(info) == []
    assert format_replication([], human_readable=False, now_ms=0) == (
        "NodeId  DirectoryId  LogEndOffset  Lag  LastFetchTimestamp  LastCaughtUpTimestamp  "
        "Status"
    )
    summary = status_summary(info)
    assert summary["currentVoters"] == []
    assert format_status(summary).splitlines()[-2:] == [
        "CurrentVoters:          []",
        "CurrentObservers:       []",
    ]


def test_status_lists_ids_in_order_whatever_the_response_order() -> None:
    info = QuorumInfo(
        "c", 1, 4, 50,
        voters=(ReplicaInfo(1, 50, T, T), ReplicaInfo(0, 50, T, T), ReplicaInfo(2, 49, T, T)),
        observers=(ReplicaInfo(3001, 50, T, T), ReplicaInfo(3000, 50, T, T)),
    )
    summary = status_summary(info)
    assert [v["id"] for v in summary["currentVoters"]] == [0, 1, 2]
    assert [o["id"] for o in summary["currentObservers"]] == [3000, 3001]
