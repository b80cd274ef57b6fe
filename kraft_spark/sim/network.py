"""The simulated network: latency, partitions, drops, duplicates, reordering and delay spikes.

All times are integer microseconds of virtual time. Every random draw comes from the simulation's
seeded RNG, so a seed reproduces every delivery time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class NetworkFaults:
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0
    reorder_jitter_us: int = 0
    delay_probability: float = 0.0
    delay_max_us: int = 0


@dataclass(slots=True)
class Network:
    rng: random.Random
    base_latency_us: tuple[int, int] = (100, 1500)
    faults: NetworkFaults = field(default_factory=NetworkFaults)
    # Pairs (a, b) with a < b that cannot talk; clients (negative ids) are never partitioned.
    blocked: set[tuple[int, int]] = field(default_factory=set)
    # Directed (src, dst) links that lose everything while the reverse direction works: a
    # one-sided cut, where requests arrive and answers vanish and nothing resets.
    one_way: set[tuple[int, int]] = field(default_factory=set)
    # Per directed link, the last delivery time: links are FIFO like TCP unless reordering.
    _last_delivery: dict[tuple[int, int], int] = field(default_factory=dict)

    def partition(self, group_a: list[int], group_b: list[int]) -> None:
        for a in group_a:
            for b in group_b:
                self.blocked.add((min(a, b), max(a, b)))

    def heal(self) -> None:
        self.blocked.clear()
        self.one_way.clear()
        self.faults = NetworkFaults()

    def can_talk(self, a: int, b: int) -> bool:
        return (min(a, b), max(a, b)) not in self.blocked

    def delivery_times(self, now_us: int, src: int, dst: int) -> list[int]:
        """When (if ever) a message sent now from src arrives at dst; two times = duplicated."""
        if not self.can_talk(src, dst) or (src, dst) in self.one_way:
            return []
        f = self.faults
        rng = self.rng
        if f.drop_probability and rng.random() < f.drop_probability:
            return []
        copies = 2 if f.duplicate_probability and rng.random() < f.duplicate_probability else 1
        times = []
        for _ in range(copies):
            latency = rng.randint(*self.base_latency_us)
            if f.delay_probability and rng.random() < f.delay_probability:
                latency += rng.randint(0, f.delay_max_us)
            at = now_us + latency
            if f.reorder_jitter_us:
                at += rng.randint(0, f.reorder_jitter_us)
            else:
                link = (src, dst)
                at = max(at, self._last_delivery.get(link, 0))
                self._last_delivery[link] = at
            times.append(at)
        return times
