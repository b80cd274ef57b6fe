"""The store under the simulator: simulated clients read and compare-and-set keys through the
real core under every fault, and porcupine checks each seed's history for linearizability.
The injected bugs of reads and conditional writes are caught in test_injected_bugs.py."""

from __future__ import annotations

import pytest

from kraft_spark.lincheck import go_available

from .test_simulation import _cli

pytestmark = pytest.mark.sim

STORE = ("--voters", "3", "--observers", "1", "--store-clients", "5")


@pytest.fixture(scope="module", autouse=True)
def _needs_go() -> None:
    reason = go_available()
    if reason is not None:
        pytest.skip(f"the porcupine checker cannot run: {reason}")


def _summary(stdout: str) -> dict[str, int]:
    last = stdout.strip().splitlines()[-1]
    return {k: int(v) for k, v in (p.split("=", 1) for p in last.split()) if v.isdigit()}


@pytest.mark.parametrize("faults", ["all,isolate-leader", "all,reconfig,isolate-leader"])
def test_histories_are_linearizable_under_every_fault(faults: str) -> None:
    result = _cli("--seeds", "0:40", "--faults", faults, *STORE)
    assert result.returncode == 0, result.stdout[-3000:]
    summary = _summary(result.stdout)
    assert summary["violations"] == 0 and summary["seeds"] == 40
    # Not vacuous: thousands of operations answered and checked.
    assert summary["store-ops-checked"] > 40 * 40, result.stdout[-500:]
