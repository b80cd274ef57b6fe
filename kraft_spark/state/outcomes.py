"""The outcomes of conditional writes and lease deletions, and the window they are known in.

A conditional write (``kraft_spark.store.txn``) or a write to a lease that does not exist can
fail, and a lease revocation or expiry deletes keys no record names; the state machine
remembers these outcomes (``KeyValueState.failed_txns``, ``LeaseTable.deleted``) so the node
that took a request, an Idempotency-Key retry of it, a watch catching up and the Delta
materializer can tell them. Memory is bounded by forgetting old ones, and forgetting must never
turn "failed" into "applied".

**The horizon.** Every replica answers an outcome query for offset ``o`` from the same rule:

* ``o >= outcome_horizon``: the outcome (failed, or applied), where ``outcome_horizon =
  max(applied_offset - window, outcomes_from)``;
* ``o < outcome_horizon``: :class:`OutcomeUnknown`, never "applied".

``outcomes_from`` is the lowest offset from which the state holds *every* outcome: 0 for a
state that applied the log from its start, the stored value for one loaded from a snapshot
(``kraft.outcomes.from``; a snapshot written before that header stored exactly the window,
so it holds everything from ``end - TXN_OUTCOME_WINDOW``), raised only by pruning, which
happens at most down to ``applied_offset - window``. So ``outcomes_from <= applied_offset -
window`` on every replica past its first window, the horizon is ``applied_offset - window``
everywhere, and the answer is a function of the log alone, however and whenever each replica
pruned, and whether it replayed or loaded a snapshot.

**Kept longer for the local materializer.** A node's ``outcome_hold`` (the driver's observer:
the offset every Delta table has materialized) keeps outcomes below the window until Delta has
them; they are stored in that node's snapshots too, so a restart does not lose them. They
never change a public answer (the horizon does not move down for them); the materializer
reads them with ``KeyValueState.known_outcomes``, which refuses (``OutcomeUnknown``) rather
than guess below ``outcomes_from``.
"""

from __future__ import annotations

from typing import NamedTuple

from kraft_spark.store.txn import Failure

# How many offsets back from the applied offset every replica knows outcomes. Stored in no
# file: a snapshot records the offset its outcomes start at instead (kraft.outcomes.from).
TXN_OUTCOME_WINDOW = 1_000_000
# Pruning runs when the applied offset has moved this fraction of the window since the last:
# memory holds at most window * (1 + 1/PRUNE_EVERY_FRACTION) offsets' outcomes (no hold).
PRUNE_EVERY_FRACTION = 8


class FailedTxn(NamedTuple):
    """A write that did not apply: its records, the keys whose condition failed, and why when
    no condition says it (a malformed header, a lease that does not exist)."""

    size: int
    failures: tuple[Failure, ...]
    reason: str = ""


class OutcomeUnknown(LookupError):
    """The outcome of the write at ``offset`` is no longer known here (below ``horizon``)."""

    def __init__(self, offset: int, horizon: int, window: int) -> None:
        self.offset = offset
        self.horizon = horizon
        self.window = window
        super().__init__(
            f"outcome unknown: the write at offset {offset} is older than the outcome window "
            f"of {window} offsets (outcomes are known from offset {horizon} on); read the keys "
            "to learn their state")


def legacy_outcomes_from(end_offset: int) -> int:
    """Where the outcomes of a snapshot without ``kraft.outcomes.from`` start: its writers
    stored exactly the failures and deletions at ``end - TXN_OUTCOME_WINDOW`` and after."""
    return max(0, end_offset - TXN_OUTCOME_WINDOW)
