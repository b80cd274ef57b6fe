"""kraft-spark local's supervisor: a node that stopped on a storage failure (exit 74) is
restarted after a doubling backoff, reset once it stays up; other exits are reported once."""

from __future__ import annotations

from typing import Any

from kraft_spark.commands.node_supervisor import MAX_BACKOFF_S, STABLE_AFTER_S, NodeSupervisor


class FakeProc:
    next_pid = 100

    def __init__(self) -> None:
        FakeProc.next_pid += 1
        self.pid = FakeProc.next_pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


def make() -> tuple[NodeSupervisor, list[str], list[FakeProc], list[float]]:
    said: list[str] = []
    launched: list[FakeProc] = []
    now = [0.0]

    def launch(node_id: int) -> Any:
        proc = FakeProc()
        launched.append(proc)
        return proc

    return NodeSupervisor(launch, said.append, clock=lambda: now[0]), said, launched, now


def test_storage_failures_restart_with_a_doubling_backoff_and_reset_when_stable() -> None:
    sup, said, launched, now = make()
    sup.start(2)
    delays = []
    for _ in range(7):
        launched[-1].returncode = 74
        sup.poll()
        assert "log directory failure" in said[-1]
        delay = float(said[-1].rsplit("in ", 1)[1].split(" s")[0])
        delays.append(delay)
        now[0] += delay - 0.01
        sup.poll()
        assert len(launched) == len(delays)  # not yet
        assert sup.running() == 1  # due to restart counts as running
        now[0] += 0.01
        sup.poll()
        assert len(launched) == len(delays) + 1 and said[-1].startswith("node 2 started again")
    assert delays == [1, 2, 4, 8, 16, 30, 30] and MAX_BACKOFF_S == 30
    now[0] += STABLE_AFTER_S
    sup.poll()  # up for a minute: the next failure starts from 1 s again
    launched[-1].returncode = 74
    sup.poll()
    assert said[-1].endswith("restarting it in 1 s")
    assert sup.restarts == 7


def test_other_exits_are_reported_once_and_left_alone() -> None:
    sup, said, launched, now = make()
    sup.start(0)
    sup.start(1)
    launched[0].returncode = -9
    for _ in range(3):
        sup.poll()
        now[0] += 5
    assert said == [f"node 0 (pid {launched[0].pid}) exited with code -9 (not restarted)"]
    assert len(launched) == 2 and sup.running() == 1
    launched[1].returncode = 1
    sup.poll()
    assert sup.running() == 0
