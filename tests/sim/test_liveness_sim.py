"""Liveness under partial faults (kraft_spark.sim.liveness) and the two bugs of issue 62's
item 6: a leader that forgets one follower's progress (only ``liveness-partial`` sees it) and
a lease kept alive after it expired (the holders' checker sees it once a holder back from a
freeze keeps its old lease alive first). Single seeds here, pinned because they are the first
of their range to catch the bug (a few seconds); the 200-seed claim on random ranges is in
test_injected_bugs.py."""

from __future__ import annotations

import pytest

from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.sim.bug_settings import BUG_SETTINGS
from kraft_spark.sim.bugs import BUGS
from kraft_spark.sim.faults import parse_faults
from kraft_spark.sim.lease_table_bug import inject
from kraft_spark.sim.liveness import election_bound_ms, led_bound_ms
from kraft_spark.sim.runner import run_seed
from kraft_spark.store.leases import LeaseTable

pytestmark = pytest.mark.sim

NO_DISK_LOSS = parse_faults(BUG_SETTINGS["uncounted-follower"][1])


def test_the_bounds_follow_from_the_timeouts() -> None:
    config = QuorumConfig()
    assert led_bound_ms(config) == 2000 + 500  # request timeout + Fetch long-poll
    # check-quorum + fetch timeout + jitter + two failed rounds + the led bound
    assert election_bound_ms(config) == 3000 + 2000 + 500 + 2 * (2 * 1000 + 1000) + 2500
    slower = QuorumConfig(fetch_timeout_ms=4000, request_timeout_ms=3000)
    assert led_bound_ms(slower) == 3500
    assert election_bound_ms(slower) == 6000 + 4000 + 500 + 6000 + 3500


def test_a_forgotten_follower_is_caught_while_the_other_is_out_and_replays() -> None:
    def run() -> str:
        result = run_seed(22, voters=3, observers=0, faults=NO_DISK_LOSS, duration_s=20.0,
                          core_class=BUGS["uncounted-follower"])
        assert result.violation is not None
        assert result.violation.invariant == "liveness-partial", result.violation
        return result.violation.detail

    first = run()
    assert "were up and connected, with leader n" in first and "bound 2500 ms" in first
    assert run() == first  # a failing seed replays exactly


def test_the_real_core_is_clean_on_that_seed() -> None:
    result = run_seed(22, voters=3, observers=0, faults=NO_DISK_LOSS, duration_s=20.0,
                      core_class=RaftCore)
    assert result.violation is None, result.violation


def test_a_lease_kept_alive_after_its_expiry_is_caught_and_the_patch_undone() -> None:
    real = LeaseTable.apply
    result = run_seed(7, voters=3, observers=1, faults=parse_faults("all"), duration_s=20.0,
                      lease_clients=4, lease_bug="expired-lease-kept-alive")
    assert result.violation is not None
    assert result.violation.invariant in {"lock-exclusive", "fencing-order", "lease-kept-alive"}
    assert LeaseTable.apply is real  # the next seed runs the real state machine
    undo = inject("expired-lease-kept-alive")
    assert LeaseTable.apply is not real
    undo()
    assert LeaseTable.apply is real
    assert inject(None)() is None and LeaseTable.apply is real
