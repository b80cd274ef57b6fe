"""Scenario files: parsing ``tests/scenarios/*.txt`` into cases, running them on a
``ScriptedCluster`` and rendering the actual output (``python -m kraft_spark.sim.script_files``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kraft_spark.raft.core import RaftCore
from kraft_spark.sim.script import ScriptedCluster
from kraft_spark.sim.script_base import ScenarioAssertionError, ScenarioError

SEPARATOR = "----"


@dataclass(slots=True)
class Case:
    """One command of a scenario file and the lines (comments, blanks) that precede it."""

    line: int
    preamble: list[str]
    command: str
    expected: str


def parse_scenario(text: str) -> tuple[list[Case], list[str]]:
    """Split a scenario file into cases and the trailing lines after the last one."""
    lines = text.splitlines()
    cases: list[Case] = []
    preamble: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            preamble.append(line)
            i += 1
            continue
        start = i + 1
        i += 1
        if i >= len(lines) or lines[i] != SEPARATOR:
            raise ScenarioError(f"line {start}: expected {SEPARATOR!r} after {line!r}")
        i += 1
        output: list[str] = []
        while i < len(lines) and lines[i].strip():
            output.append(lines[i])
            i += 1
        cases.append(Case(start, preamble, line, "\n".join(output)))
        preamble = []
    return cases, preamble


def render_scenario(cases: list[Case], trailing: list[str], outputs: list[str]) -> str:
    out: list[str] = []
    for case, output in zip(cases, outputs, strict=True):
        out.extend(case.preamble)
        out.append(case.command)
        out.append(SEPARATOR)
        out.extend(output.splitlines())
    out.extend(trailing)
    return "\n".join(out) + "\n"


@dataclass(slots=True)
class ScenarioRun:
    """The result of running a scenario file."""

    expected: str  # the file as it is
    # The file with the actual outputs of the cases that ran (the rest keep their golden text).
    actual: str
    # The first failed assertion or command error, naming file, line and command; None if clean.
    error: ScenarioError | ScenarioAssertionError | None
    # A ``# xfail: reason`` line at the top of the file: a known core bug the scenario exposes.
    xfail_reason: str | None


def xfail_reason(text: str) -> str | None:
    """The reason of a ``# xfail: ...`` comment among the file's leading comment lines."""
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        if line.startswith("# xfail:"):
            return line.removeprefix("# xfail:").strip()
    return None


def run_file(
    path: Path,
    on_case: Callable[[Case, str], None] | None = None,
    core_class: type[RaftCore] = RaftCore,
) -> ScenarioRun:
    """Run a scenario file, stopping at the first failed assertion or command error.
    ``on_case`` sees each case and its output as it runs; ``core_class`` replaces ``RaftCore``
    (to run a scenario against a variant of the core)."""
    text = path.read_text()
    cases, trailing = parse_scenario(text)
    cluster = ScriptedCluster(core_class)
    outputs: list[str] = []
    error: ScenarioError | ScenarioAssertionError | None = None
    for case in cases:
        where = f"{path.name}:{case.line}: {case.command}"
        try:
            output = cluster.run(case.command)
        except ScenarioAssertionError as exc:
            error = ScenarioAssertionError(f"{where}\n  {exc}")
            break
        except ScenarioError as exc:
            error = ScenarioError(f"{where}\n  {exc}")
            break
        outputs.append(output)
        if on_case is not None:
            on_case(case, output)
    outputs.extend(case.expected for case in cases[len(outputs) :])
    actual = render_scenario(cases, trailing, outputs)
    return ScenarioRun(text, actual, error, xfail_reason(text))


def main(argv: list[str] | None = None) -> int:
    """``python -m kraft_spark.sim.script_files FILE...``: run scenario files, printing each
    case with its actual output as it runs (the first failure ends the run with exit 1)."""

    def show(case: Case, output: str) -> None:
        sys.stdout.write(render_scenario([case], [], [output]))

    for name in argv if argv is not None else sys.argv[1:]:
        result = run_file(Path(name), show)
        if result.error is not None:
            sys.stdout.write(f"FAILED: {result.error}\n")
            return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
