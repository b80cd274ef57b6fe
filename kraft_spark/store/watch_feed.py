"""How a node feeds its ``WatchHub`` from its state machine, without a loop of its own: the
real node's ``NodeStore`` and the simulator (``kraft_spark.sim.watch_clients``) both use this
class, so the simulator checks the very feeding a node does.

The owner calls, in this order, as its state machine moves:

* :meth:`WatchFeed.on_batch` right after the state applied a committed batch: the batch's
  writes that took effect (the state's judgement: a failed conditional write's records are
  left out; a lease revoked or expired there deletes each of its keys) wait in ``pending``;
* :meth:`WatchFeed.on_commit` once per high-watermark move, after the state applied what it
  could: ``pending`` is published up to the state's applied offset;
* :meth:`WatchFeed.on_snapshot_loaded` when a snapshot replaced the state: the writes it
  skipped will never be published, so the watches that needed them end (``skip_to``).

The same writes feed ``history`` (``kraft_spark.store.history``: past revisions for etcd's
Range, a watch's ``prev_kv``), always (not only while someone watches), at ``on_batch``; it
starts from the state as it is when the feed is made, and again at each snapshot load.

Invariant: the hub's applied offset never passes the state's, and every write the state
applied below the hub's applied offset was published once, in (offset, index) order, unless a
snapshot load skipped it (and then every watch that needed it ended).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch
from kraft_spark.state.machine import KeyValueState
from kraft_spark.state.snapshot_file import label
from kraft_spark.store.history import DEFAULT_RETENTION, History
from kraft_spark.store.history_feed import feed_batch
from kraft_spark.store.watch import WatchEvent, WatchHub, batch_events, log_reader
from kraft_spark.store.watch_log import CommittedLog

__all__ = ["WatchFeed"]

log = logging.getLogger(__name__)


class WatchFeed:
    """The hub of one node (``hub``) and its feeding from ``state()`` (the node's
    ``KeyValueState``; called each time, so a replaced state object is followed). Catch-up reads
    come from ``the_log`` (``snapshot()``: the newest snapshot's label, for ``BelowLogStart``).
    ``hub_class`` and ``hub_options``: the hub to make (the simulator's settings and its
    injected bugs). ``history_revisions``: the history's retention."""

    def __init__(self, state: Callable[[], KeyValueState], the_log: CommittedLog,
                 snapshot: Callable[[], str | None], *, hub_class: type[WatchHub] = WatchHub,
                 history_revisions: int = DEFAULT_RETENTION, **hub_options: Any) -> None:
        self._state = state
        self.history = History(history_revisions)
        self.history.reset(state().items(), state().applied_offset)
        self._pending: list[WatchEvent] = []
        self.hub = hub_class(
            log_reader(the_log, end=lambda: state().applied_offset, snapshot=snapshot,
                       failed_group=self.failed_size, deleted_by=self.deleted_by,
                       # Below this the state no longer knows which conditional writes
                       # failed (kraft_spark.state.outcomes).
                       start=lambda: state().outcome_horizon),
            applied_offset=state().applied_offset, **hub_options,
        )

    def failed_size(self, offset: int) -> int:
        failure = self._state().txn_failure(offset)
        return failure.size if failure is not None else 0

    def deleted_by(self, offset: int) -> tuple[bytes, ...]:
        return self._state().leases.deleted_at(offset)

    def on_batch(self, batch: Batch) -> None:
        """The state has just applied ``batch`` (judged against the state as it is now)."""
        feed_batch(self.history, batch, self.failed_size, self.deleted_by)
        if self.hub.watchers:
            batch_events(batch, self.failed_size, out=self._pending, deleted_by=self.deleted_by)

    def on_snapshot_loaded(self, snapshot_id: OffsetAndEpoch) -> None:
        self._pending.clear()
        state = self._state()
        self.history.reset(state.items(), state.applied_offset)
        self.hub.skip_to(snapshot_id.offset, label(snapshot_id))

    def on_commit(self) -> int:
        """Publish what the state applied since the last call; returns the applied offset.
        Never raises: a failed publish ends every watch at what its consumer received."""
        hub = self.hub
        applied = self._state().applied_offset
        try:
            if applied > hub.applied_offset or self._pending:
                events, self._pending = self._pending, []
                hub.publish(events, applied)
        except Exception:
            # A bug, never an input: no watch may miss these events silently. Every watch
            # ends at what its consumer received, to resume from the log; watches opened
            # from now on start past it.
            log.exception("publishing the watch events below offset %d failed: ending every "
                          "watch of this node so that they resume from the log", applied)
            hub.abort("this node failed to publish the writes below offset "
                      f"{applied} to its watches", applied)
        return applied
