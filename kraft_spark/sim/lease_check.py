"""The lock checker of the simulated lease holders (``kraft_spark.sim.lease_clients``).

A *hold* is what a client believes: from the moment its compare-and-set that created the lock
key was acknowledged, until the earlier of its release (when it sent the revoke) and the end of
its lease's validity as the client counts it (the first send of its last acknowledged
keep-alive plus a share of the TTL). Its *token* is the offset of the write that created the
key: the fencing token a holder hands to the resource it protects.

Invariants, each an ``InvariantViolation`` when broken:

* ``lock-exclusive``: no two holds overlap in time.
* ``fencing-order``: holds, in the order they began, carry increasing tokens (a resource that
  refuses tokens lower than the highest it saw never refuses the current holder).
* ``lease-kept-alive``: a read of the lock key made entirely within a hold finds the key,
  written by the holder's own write: no key expires while its holder's keep-alives commit.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from kraft_spark.sim.invariants import InvariantViolation


@dataclass(slots=True)
class Hold:
    lock: str
    client: int
    token: int
    start_us: int
    end_us: int

    @property
    def real(self) -> bool:
        """Empty when the lease's validity ended before the acquisition was acknowledged."""
        return self.start_us < self.end_us


@dataclass(slots=True, frozen=True)
class HolderRead:
    """A linearizable read of the lock key by a client that believed it held the lock."""

    client: int
    token: int
    call_us: int
    return_us: int
    found_token: int | None  # the key's mod offset, None when absent


def check_holds(holds: list[Hold], reads: list[HolderRead]) -> None:
    for lock in sorted({h.lock for h in holds}):
        _check_lock([h for h in holds if h.lock == lock], reads)


def _check_lock(holds: list[Hold], reads: list[HolderRead]) -> None:
    real = sorted((h for h in holds if h.real), key=lambda h: (h.start_us, h.token))
    for before, after in itertools.pairwise(real):
        # Equal tokens only for one holder's hold resumed after a freeze (the same key).
        if after.token < before.token or (after.token == before.token
                                          and after.client != before.client):
            raise InvariantViolation(
                "fencing-order",
                f"client {after.client}'s hold of {after.lock} from {after.start_us} us has "
                f"token {after.token}, "
                f"not above client {before.client}'s {before.token} that began before it")
    # Sorted by start: overlap with any earlier hold implies overlap with the latest-ending one.
    latest: Hold | None = None
    for hold in real:
        if latest is not None and hold.start_us < latest.end_us:
            raise InvariantViolation(
                "lock-exclusive",
                f"client {hold.client} held the lock (token {hold.token}) from "
                f"{hold.start_us} us while client {latest.client} held it (token "
                f"{latest.token}) until {latest.end_us} us")
        if latest is None or hold.end_us > latest.end_us:
            latest = hold
    spans = {(h.client, h.token): h for h in real}
    for read in reads:
        span = spans.get((read.client, read.token))
        if span is None or not span.start_us <= read.call_us <= read.return_us <= span.end_us:
            continue  # not entirely within the hold: nothing is promised
        if read.found_token != read.token:
            found = "no key" if read.found_token is None else f"token {read.found_token}"
            raise InvariantViolation(
                "lease-kept-alive",
                f"client {read.client} read {found} at {read.call_us}..{read.return_us} us "
                f"while its lease, kept alive, held the lock with token {read.token} until "
                f"{span.end_us} us")
