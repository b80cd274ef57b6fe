"""The order of PreferredSuccessors in a graceful resignation (``LeaderProgress``)."""

from __future__ import annotations

from kraft_spark.raft.progress import LeaderProgress


def test_acknowledged_offsets_rank_the_successors() -> None:
    progress = LeaderProgress(1, (1, 2, 3))
    progress.on_fetch(2, 10, 40, 50)
    progress.on_fetch(3, 10, 50, 50)
    assert progress.preferred_successors() == (3, 2)


def test_a_tie_goes_to_the_voter_sent_the_latest_records() -> None:
    """Both acknowledged 50; voter 3 was since sent the batch ending at 53, voter 2 not yet:
    voter 3's log is the longer one, so it goes first (voter 2 could not win its vote)."""
    progress = LeaderProgress(1, (1, 2, 3))
    progress.on_fetch(2, 10, 50, 53)
    progress.on_fetch(3, 10, 50, 53)
    assert progress.preferred_successors() == (2, 3)  # a plain tie: lower id first
    progress.on_sent(3, 53)
    assert progress.preferred_successors() == (3, 2)


def test_records_sent_count_only_as_far_as_they_reach() -> None:
    progress = LeaderProgress(1, (1, 2, 3))
    progress.on_fetch(2, 10, 60, 60)
    progress.on_fetch(3, 10, 40, 60)
    progress.on_sent(3, 55)  # still short of what voter 2 acknowledged
    progress.on_sent(9, 99)  # not a voter: ignored
    assert progress.preferred_successors() == (2, 3)
