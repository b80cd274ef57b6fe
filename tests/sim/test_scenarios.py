"""Data-driven scenario tests (etcd-io/raft ``testdata`` style) for the tricky consensus paths.

Each ``tests/scenarios/*.txt`` file is run by ``kraft_spark.sim.script_files``; the actual output of
every command must equal the golden output in the file. The scripts also assert their key
properties directly with ``expect-*`` commands, which fail with a message naming the line.

Regenerate the golden outputs after a deliberate change with ``KRAFT_SPARK_REWRITE=1``, then
read the diff: the goldens are assertions.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from kraft_spark.sim.bugs import BUGS
from kraft_spark.sim.script import ScriptedCluster
from kraft_spark.sim.script_base import ScenarioAssertionError, ScenarioError
from kraft_spark.sim.script_files import parse_scenario, render_scenario, run_file, xfail_reason

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
SCENARIOS = sorted(SCENARIO_DIR.glob("*.txt"))
REWRITE = os.environ.get("KRAFT_SPARK_REWRITE") == "1"


def _param(path: Path) -> object:
    """A scenario whose file starts with ``# xfail: reason`` exposes a known core bug: it is
    expected to fail (strictly: once the core is fixed it passes, and the marker must go)."""
    reason = xfail_reason(path.read_text())
    marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
    return pytest.param(path, marks=marks, id=path.stem)


def test_scenarios_exist() -> None:
    assert len(SCENARIOS) >= 7, f"expected the scenario files in {SCENARIO_DIR}"


@pytest.mark.parametrize("path", [_param(p) for p in SCENARIOS])
def test_scenario(path: Path) -> None:
    result = run_file(path)
    if REWRITE and result.actual != result.expected:
        path.write_text(result.actual)
    if result.error is not None:
        pytest.fail(str(result.error), pytrace=False)
    if REWRITE:
        return
    if result.actual != result.expected:
        diff = "".join(
            difflib.unified_diff(
                result.expected.splitlines(keepends=True),
                result.actual.splitlines(keepends=True),
                fromfile=f"{path.name} (golden)",
                tofile=f"{path.name} (actual)",
            )
        )
        pytest.fail(
            f"{path.name}: output differs from the golden file "
            f"(KRAFT_SPARK_REWRITE=1 regenerates it; review the diff):\n{diff}",
            pytrace=False,
        )


# ---------------------------------------------------------------------- the scenarios have teeth

# Each deliberately broken core of kraft_spark.sim.bugs must trip an ``expect-*`` assertion (not
# only a golden diff) in the scenario that exercises the rule it breaks.
BUG_CAUGHT_BY = {
    "double-vote": ("01_split_vote", "expected role Candidate, got Leader"),
    "stale-log-vote": ("02_stale_log_candidate", "expected role Candidate, got Leader"),
    "no-truncate": ("03_divergence_two_epochs", "expected log-end 2, got 4"),
    "minority-hw": ("04_zombie_leader_check_quorum", "expected hw 1, got 2"),
    "commit-old-epoch": ("06a_figure8_hw_held_back", "expected hw 0, got 2"),
    "ack-before-fsync": ("06a_figure8_hw_held_back", "expected 0 matching pending message"),
}


@pytest.mark.parametrize("bug", sorted(BUG_CAUGHT_BY))
def test_injected_bug_fails_a_scenario_assertion(bug: str) -> None:
    scenario, message = BUG_CAUGHT_BY[bug]
    result = run_file(SCENARIO_DIR / f"{scenario}.txt", core_class=BUGS[bug])
    assert isinstance(result.error, ScenarioAssertionError), (
        f"{bug}: {scenario} did not fail an assertion (error: {result.error})"
    )
    assert message in str(result.error)


# ---------------------------------------------------------------------- the harness itself


def test_parse_and_render_round_trip() -> None:
    text = "# comment\n\nstatus\n----\nline 1\nline 2\n\n# tail\n"
    cases, trailing = parse_scenario(text)
    assert [c.command for c in cases] == ["status"]
    assert cases[0].expected == "line 1\nline 2"
    assert render_scenario(cases, trailing, [c.expected for c in cases]) == text


def test_missing_separator_is_reported() -> None:
    with pytest.raises(ScenarioError, match="expected '----'"):
        parse_scenario("status\nnot a separator\n")


def test_failed_expectation_names_the_state() -> None:
    cluster = ScriptedCluster()
    cluster.run("add-nodes 3")
    with pytest.raises(AssertionError, match="n1: expected role Leader, got Unattached"):
        cluster.run("expect-role 1 Leader")


def test_unknown_command_and_option_are_errors() -> None:
    cluster = ScriptedCluster()
    cluster.run("add-nodes 1")
    with pytest.raises(ScenarioError, match="unknown command"):
        cluster.run("frobnicate 1")
    with pytest.raises(ScenarioError, match="unknown option"):
        cluster.run("deliver form=1")


def test_nothing_moves_unless_a_command_says_so() -> None:
    cluster = ScriptedCluster()
    cluster.run("add-nodes 3")
    cluster.run("campaign 1")
    cluster.run("expect-pending 2")
    cluster.run("expect-role 1 Candidate")
    cluster.run("expect-epoch 2 0")
    cluster.run("stabilize")
    cluster.run("expect-role 1 Leader")
    cluster.run("expect-hw 1 1")
    cluster.run("expect-converged 1,2,3")


def test_xfail_marker_is_read_from_leading_comments() -> None:
    assert xfail_reason("# title\n# xfail: core bug X\n\nstatus\n----\nok\n") == "core bug X"
    assert xfail_reason("# title\n\n# xfail: too late\nstatus\n----\nok\n") is None
