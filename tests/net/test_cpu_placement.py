"""Role-aware CPU placement (kraft.cpu.affinity=role): the split, the moves, and its setting."""

from __future__ import annotations

import pytest

from kraft_spark.net.config import NodeConfig
from kraft_spark.net.cpu_placement import RolePlacement, split_cpus
from kraft_spark.raft.config import ConfigError

# No event loop: the same code on both loops (so it runs once, on asyncio's).
pytestmark = pytest.mark.loop_free


def test_split_gives_the_leader_the_lower_half() -> None:
    assert split_cpus([1, 0]) == (frozenset({0}), frozenset({1}))
    assert split_cpus(range(4)) == (frozenset({0, 1}), frozenset({2, 3}))
    assert split_cpus([2, 5, 7]) == (frozenset({2, 5}), frozenset({7}))
    assert split_cpus([3]) is None
    assert split_cpus([]) is None


def test_moves_every_thread_once_per_role_change() -> None:
    placed: list[tuple[int, frozenset[int]]] = []
    placement = RolePlacement([0, 1], set_affinity=lambda tid, cpus: placed.append((tid, cpus)),
                              threads=lambda: [10, 11])
    placement.on_role(False)
    placement.on_role(False)  # already there: no system call
    placement.on_role(True)
    assert placed == [(10, frozenset({1})), (11, frozenset({1})),
                      (10, frozenset({0})), (11, frozenset({0}))]
    assert placement.moves == 2


def test_a_refused_thread_does_not_stop_the_others_or_the_node() -> None:
    placed: list[int] = []

    def set_affinity(tid: int, cpus: frozenset[int]) -> None:
        if tid == 10:
            raise ProcessLookupError("thread exited")
        placed.append(tid)

    placement = RolePlacement([0, 1], set_affinity=set_affinity, threads=lambda: [10, 11])
    placement.on_role(True)
    assert placed == [11]


def test_one_cpu_places_nothing() -> None:
    def refuse(tid: int, cpus: frozenset[int]) -> None:
        raise AssertionError("must not be called with one CPU")

    placement = RolePlacement([0], set_affinity=refuse, threads=lambda: [1])
    placement.on_role(True)
    assert not placement.active and placement.moves == 0


def _props(**extra: str) -> dict[str, str]:
    return {"node.id": "0", "log.dirs": "/tmp/x", "controller.quorum.voters": "0@127.0.0.1:9093",
            **extra}


def test_setting_defaults_to_none_and_accepts_role() -> None:
    assert NodeConfig.from_properties(_props()).cpu_affinity == "none"
    config = NodeConfig.from_properties(_props(**{"kraft.cpu.affinity": "Role"}))
    assert config.cpu_affinity == "role"


def test_setting_rejects_other_values_by_name() -> None:
    with pytest.raises(ConfigError, match=r"kraft.cpu.affinity must be one of none, role"):
        NodeConfig.from_properties(_props(**{"kraft.cpu.affinity": "pinned"}))
