"""The simulator over many seeds: clean on the real core, deterministic, and able to fail."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from kraft_spark.sim.coverage import MOMENTS
from kraft_spark.sim.faults import FAULT_KINDS, MEMBERSHIP_FAULTS
from kraft_spark.sim.runner import run_seed

ALL_FAULTS = frozenset(FAULT_KINDS) - {"reconfig", "reconfig-race"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraft_spark", "sim", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.sim
def test_three_voters_all_faults_are_clean() -> None:
    result = _cli("--seeds", "0:200", "--voters", "3", "--faults", "all")
    assert result.returncode == 0, result.stdout[-3000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.startswith("seeds=200 ") and " violations=0 " in summary, summary
    commits = int(summary.split("commits=")[1].split()[0])
    assert commits > 200 * 50, f"too few commits for a meaningful run: {summary}"


@pytest.mark.sim
def test_five_voters_with_observer_are_clean() -> None:
    result = _cli("--seeds", "1000:1060", "--voters", "5", "--observers", "1", "--faults", "all")
    assert result.returncode == 0, result.stdout[-3000:]
    assert " violations=0" in result.stdout.strip().splitlines()[-1]


@pytest.mark.sim
def test_targeted_leader_churn_is_clean() -> None:
    """The figure-8 schedule (leaders cut off at once, old ones elected again) on the real core:
    every invariant holds and the quorum recovers after each seed's faults."""
    result = _cli("--seeds", "0:100", "--voters", "3", "--faults", "all,leader-churn")
    assert result.returncode == 0, result.stdout[-3000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " violations=0 " in summary, summary
    assert int(summary.split("elections=")[1].split()[0]) > 100 * 3, summary


@pytest.mark.sim
def test_targeted_split_votes_are_clean() -> None:
    """The split-vote schedule (every follower campaigning in the same epoch, again and again)
    on the real core: one vote per epoch, one leader per epoch, and the quorum recovers; on a
    range drawn for this run (printed)."""
    start = random.SystemRandom().randrange(0, 1_000_000)
    print(f"split votes: seeds {start}:{start + 100}")
    result = _cli("--seeds", f"{start}:{start + 100}", "--faults", "all,split-vote")
    assert result.returncode == 0, result.stdout[-3000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " violations=0 " in summary, summary


@pytest.mark.sim
def test_a_stale_leader_does_not_fail_a_producer() -> None:
    """Seed 5005617 (found by a 38,000-seed campaign): a leader paused, cut off, then fed
    stale duplicated Fetches keeps leading a few seconds in an old epoch; a producer whose
    last batch the new leader acknowledged reaches it. It must answer retriably (the producer
    tries the other voters), not OUT_OF_ORDER_SEQUENCE_NUMBER, a final error for the client."""
    result = _cli("--seed", "5005617", "--voters", "3", "--faults", "all", "--duration", "20")
    assert result.returncode == 0, result.stdout[-2000:]
    assert result.stdout.strip().splitlines()[-1].split()[4] == "violations=0"


def test_same_seed_prints_the_same_trace() -> None:
    args = ("--seed", "7", "--voters", "3", "--faults", "all", "--duration", "8", "--trace")
    first, second = _cli(*args), _cli(*args)
    assert first.returncode == 0, first.stdout[-2000:]
    assert len(first.stdout.splitlines()) > 100
    assert first.stdout == second.stdout


@pytest.mark.sim
def test_different_seeds_differ() -> None:
    a = run_seed(1, voters=3, observers=0, faults=ALL_FAULTS, duration_s=5)
    b = run_seed(2, voters=3, observers=0, faults=ALL_FAULTS, duration_s=5)
    assert (a.events, a.commits) != (b.events, b.commits)


@pytest.mark.sim
def test_violation_replays_exactly() -> None:
    caught = _cli("--seeds", "0:200", "--faults", "all", "--inject-bug", "double-vote")
    seed = caught.stdout.split("VIOLATION seed=")[1].split()[0]
    replay = _cli("--seed", seed, "--faults", "all", "--inject-bug", "double-vote")
    assert replay.returncode == 1
    assert replay.stdout.splitlines()[0] == caught.stdout.splitlines()[0]


def test_bad_arguments_give_one_clear_line() -> None:
    result = _cli("--seeds", "5:2")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "B must be greater than A" in result.stderr
    result = _cli("--faults", "crash,meteor")
    assert result.returncode == 2 and "unknown fault(s) meteor" in result.stderr


@pytest.mark.sim
def test_real_segmented_log_on_simulated_disk_is_clean() -> None:
    """The same core on the real Kafka-format log over a file system that loses unsynced
    writes and tears the last one; recovery must keep everything fsync'd."""
    result = _cli("--seeds", "0:60", "--faults", "all", "--log", "segmented")
    assert result.returncode == 0, result.stdout[-3000:]
    assert " violations=0" in result.stdout.strip().splitlines()[-1]
    result = _cli("--seeds", "500:520", "--voters", "5", "--observers", "1", "--log", "segmented")
    assert result.returncode == 0, result.stdout[-3000:]


@pytest.mark.sim
def test_segmented_log_run_still_catches_a_bug() -> None:
    result = _cli("--seeds", "0:200", "--log", "segmented", "--inject-bug", "ack-before-fsync")
    assert result.returncode == 1
    assert "invariant=majority-holds-high-watermark" in result.stdout


@pytest.mark.sim
def test_voter_changes_under_every_fault() -> None:
    """KIP-853 under faults: the reconfig fault adds observers and removes voters (the leader
    too, and voters whose disk was lost) while nodes crash, pause, lose disks and the network
    partitions, and bit rot and torn writes damage logs; every invariant holds against the
    voter set in force."""
    changes = 0
    for voters, seeds in (("3", "3000:3100"), ("5", "0:60")):
        result = _cli("--seeds", seeds, "--voters", voters, "--observers", "2",
                      "--faults", "all,reconfig")
        assert result.returncode == 0, result.stdout[-3000:]
        summary = result.stdout.strip().splitlines()[-1]
        counts = dict(part.split("=") for part in summary.split())
        assert counts["violations"] == "0", summary
        changes += int(counts["voter-changes"])
    assert changes > 40, f"too few voter changes for a meaningful run ({changes})"


@pytest.mark.sim
def test_the_membership_schedule_reaches_every_dangerous_moment_and_stays_clean() -> None:
    """The membership faults (reconfig and reconfig-race): clean on the real core, and the
    coverage counters show each dangerous moment of a voter change happened. On a range drawn
    at random (printed). Drawn ranges found seeds 1843740, 1141986 and 945262 (checker false
    positives, fixed), 945173 (beyond the fault budget, fixed in the schedule) and 124732 (a
    voter starved of snapshot downloads by the simulator's 1-byte FetchSnapshot chunks, which
    outlived every snapshot they fetched: chunks are 64 bytes now)."""
    start = random.SystemRandom().randrange(0, 2_000_000)
    print(f"membership: seeds {start}:{start + 200}")
    result = _cli("--seeds", f"{start}:{start + 200}", "--observers", "2",
                  "--faults", MEMBERSHIP_FAULTS)
    assert result.returncode == 0, result.stdout[-3000:]
    summary = result.stdout.strip().splitlines()[-1]
    counts = dict(part.split("=") for part in summary.split())
    assert counts["violations"] == "0", summary
    for moment in MOMENTS:
        assert int(counts[moment]) > 0, f"{moment} never happened: {summary}"


@pytest.mark.sim
def test_snapshots_retention_and_fetch_snapshot_happen_under_faults() -> None:
    """KIP-630 under every fault: nodes snapshot, move their log start, and catch up from
    snapshots (FetchSnapshot) after crashes, disk loss and partitions; the state of every node
    equals the replay of the committed log (checked at each snapshot, install and restart)."""
    result = _cli("--seeds", "2000:2050", "--observers", "1", "--faults", "all")
    assert result.returncode == 0, result.stdout[-3000:]
    summary = result.stdout.strip().splitlines()[-1]
    counts = dict(part.split("=") for part in summary.split())
    assert int(counts["snapshots"]) > 500 and int(counts["log-starts-advanced"]) > 500, summary
    assert int(counts["installed"]) > 20, summary
    plain = _cli("--seeds", "0:20", "--no-snapshots")
    assert plain.returncode == 0 and plain.stdout.strip().endswith("violations=0")


@pytest.mark.sim
def test_disk_faults_are_survived_and_liveness_returns() -> None:
    """ENOSPC and EIO on append and on fsync: the node stops, its supervisor restarts it, the
    invariants hold and the quorum commits again after the faults clear (disk_faults)."""
    result = _cli("--seeds", "0:60", "--faults", "disk-full,io-error,crash,partition")
    assert result.returncode == 0, result.stdout[-3000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " violations=0 " in summary, summary
    failures = _cli("--seed", "3", "--faults", "disk-full,io-error", "--trace")
    assert "STORAGE FAILURE simulated disk:" in failures.stdout  # the faults did strike


@pytest.mark.sim
def test_bit_rot_is_found_cut_away_and_caught_up() -> None:
    """A durable batch goes bad: the node that reads it stops, its restart cuts the log there,
    and it votes again once caught up (disk_faults); every invariant holds."""
    result = _cli("--seeds", "0:60", "--faults", "bit-rot,crash,partition")
    assert result.returncode == 0, result.stdout[-3000:]
    assert " violations=0 " in result.stdout.strip().splitlines()[-1]
    trace = _cli("--seed", "3", "--faults", "bit-rot,crash", "--trace").stdout
    assert "STORAGE FAILURE <simulated segment>" in trace and "CRC mismatch" in trace
    assert "REPAIR log cut at" in trace and "caught up after disk loss: voting again" in trace
