"""The state machine's lease bug of the simulator (``--inject-bug expired-lease-kept-alive``,
with ``--lease-clients``): applying ``expire`` deletes the lease's keys but leaves the lease in
the table, so a later keep-alive of it succeeds, as if a lease could be kept alive after it
expired. Every replica applies the same code (the replay too), so the replicas agree and only
what the holders saw can tell: a holder back from a freeze keeps its old lease alive first
(``sim.lease_clients``), is told it succeeded, and believes it still holds the lock whose key
the expiry deleted (``lease-kept-alive``: its read misses the key; or ``lock-exclusive``:
another holder took the lock meanwhile).

The bug is a patch of ``LeaseTable.apply`` for the length of one seed (``inject``), undone by
the function it returns, so a test process running other seeds afterwards runs the real code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kraft_spark.store.leases import LeaseTable

LEASE_TABLE_BUGS = ("expired-lease-kept-alive",)


def inject(bug: str | None) -> Callable[[], None]:
    """Patch ``LeaseTable.apply`` when ``bug`` is one of ``LEASE_TABLE_BUGS``; return the undo."""
    if bug not in LEASE_TABLE_BUGS:
        return lambda: None
    real = LeaseTable.apply

    def apply(self: LeaseTable, body: dict[str, Any], offset: int) -> tuple[str, list[bytes]]:
        if body["op"] != "expire":
            return real(self, body, offset)
        lease = self.leases.get(body["id"])
        if lease is None or body["after"] != lease.keepalive_offset:
            return real(self, body, offset)
        reason, doomed = real(self, body, offset)
        self.leases[lease.lease_id] = lease  # the bug: the expired lease stays in force
        lease.keys.clear()
        return reason, doomed

    LeaseTable.apply = apply  # type: ignore[method-assign]

    def undo() -> None:
        LeaseTable.apply = real  # type: ignore[method-assign]

    return undo
