"""The frame of a targeted fault schedule (``reconfig-race``, ``split-vote``): a move every 2-6 s
of simulated time until the faults stop, drawn from a random stream of its own, so that the other
faults' draws, and every seed run without the schedule, are unchanged."""

from __future__ import annotations

import random
from typing import Generic, Protocol, TypeVar

from kraft_spark.sim.cluster import Cluster


class Healing(Protocol):
    """The fault injector (sim/faults.py) as every schedule sees it."""

    healed: bool


InjectorT = TypeVar("InjectorT", bound=Healing)


class PeriodicSchedule(Generic[InjectorT]):
    def __init__(self, cluster: Cluster, until_us: int, injector: InjectorT, stream: tuple[int, int]
                 ) -> None:
        """``stream``: (a, b), the random stream seeded with seed * a + b."""
        self.cluster = cluster
        self.injector = injector
        self.until_us = until_us
        self.rng = random.Random(cluster.seed * stream[0] + stream[1])
        self._schedule()

    def _schedule(self) -> None:
        when = self.cluster.now + self.rng.randint(2_000_000, 6_000_000)
        if when < self.until_us:
            self.cluster.at(when, self._fire)

    def _fire(self) -> None:
        if self.injector.healed:
            return
        try:
            self.move()
        finally:
            self._schedule()

    def move(self) -> None:
        raise NotImplementedError
