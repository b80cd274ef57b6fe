"""Watches under the simulator: every node's real hub, fed as a node feeds it, watched by fast
and slow clients that are cut off, resume by id after crashes and hops, and reload the state
when a snapshot replaced what they missed, over leases of several keys revoked and expiring,
under every fault; each item checked against the committed history
(kraft_spark.sim.watch_check). The injected watch bugs are in test_injected_bugs.py.

The seed range is drawn per run (printed, so a failure replays with the same command)."""

from __future__ import annotations

import pytest

from kraft_spark.sim.bug_settings import WATCHES
from kraft_spark.sim.bugs import WATCH_BUGS

from .test_lease_sim import _draw, _summary
from .test_simulation import _cli

pytestmark = pytest.mark.sim


def test_watch_streams_are_the_committed_history_under_every_fault() -> None:
    seeds = _draw(6)
    result = _cli("--seeds", seeds, *WATCHES)
    assert result.returncode == 0, f"--seeds {seeds}:\n{result.stdout[-3000:]}"
    summary = _summary(result.stdout)
    assert summary["violations"] == 0 and summary["seeds"] == 6
    # Not vacuous: events delivered and checked, and every way of resuming taken.
    assert summary["watch-events"] > 6 * 100, result.stdout[-500:]
    assert summary["watch-resumes"] > 6 * 20, result.stdout[-500:]
    assert summary["watch-resets"] > 6 * 10, result.stdout[-500:]
    assert summary["watch-cutoffs"] > 0, result.stdout[-500:]
    assert summary["lock-holds"] > 6, result.stdout[-500:]


def test_a_watch_violation_replays_exactly() -> None:
    bug = "watch-drops-second-event"
    runs = [_cli("--seed", "3", *WATCHES, "--inject-bug", bug) for _ in range(2)]
    assert runs[0].returncode == 1, runs[0].stdout[-2000:]
    assert "invariant=watch-stream" in runs[0].stdout
    assert runs[0].stdout == runs[1].stdout


def test_watch_bug_needs_watch_clients() -> None:
    result = _cli("--seeds", "0:1", "--inject-bug", next(iter(WATCH_BUGS)))
    assert result.returncode == 2
    assert "--watch-clients" in result.stderr
