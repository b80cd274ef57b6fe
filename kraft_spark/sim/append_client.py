"""The simulator's clients as the cluster sees them: the appending client (``Cluster`` drives
it) and what it needs of the store's (``kraft_spark.sim.store_clients``)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# Store clients' indexes in the cluster's client-id space start here (ids -(BASE + 1 + i)).
STORE_CLIENT_BASE = 1000


def retry_target(rng: random.Random, voters: Sequence[int], target: int,
                 leader_id: int) -> tuple[int, int]:
    """Where a client sends an attempt that was answered with an error, and after how many
    microseconds: at once to the leader the answer names, unless it names none or the node just
    asked; otherwise to a random voter after a pause. Every simulated client retries so."""
    if leader_id >= 0 and leader_id != target:
        return leader_id, 1_000
    return rng.choice(voters), 50_000


class StoreClientsReceiver(Protocol):
    def receive(self, index: int, payload: Any) -> None:
        """An answer to store client ``index`` (its index in the store clients' list)."""


@dataclass(slots=True)
class SimClient:
    """Appends unique values one at a time, retrying with the same producer sequence."""

    client_id: int  # negative: clients live outside the node id space
    producer_id: int
    seq: int = 0
    target: int = 0
    request_id: int = 0  # of the attempt in flight, 0 when idle
    attempt_deadline: int = 0
    acked: int = 0

    def value(self) -> bytes:
        return f"c{-self.client_id}-s{self.seq}".encode()
