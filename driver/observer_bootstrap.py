"""The driver's side of KIP-630: keep the observer's log until it is materialized, and when the
log the tables need next is gone anyway, bootstrap the tables from the observer's snapshot.

* ``hold_observer_log``: the observer's retention never moves its log start past what every
  table has materialized (the size limit still wins; see ``kraft_spark.state.policy``).
* ``bootstrap_if_needed``: called by a materializer thread before it reads the observer's log
  from ``resume``; if the log starts after ``resume`` (a fresh warehouse for a compacted
  quorum, or a materializer that fell behind the size limit), or the observer's state no
  longer knows every outcome of conditional writes and lease deletions from ``resume`` (it
  keeps them for the materializer, but a snapshot written before it did holds only the
  outcome window: ``kraft_spark.state.outcomes``), the tables are moved to the observer's
  newest snapshot by ``kraft_spark.delta.bootstrap`` (gap recorded in the commits'
  ``userMetadata`` and logged) rather than guess an outcome. One thread bootstraps; the other
  then finds its tables moved.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
_lock = threading.Lock()


def hold_observer_log(node: Any, materialized: Callable[[], int]) -> None:
    """Make the observer ``node``'s retention wait for the materializer."""
    node.keeper.local_hold = materialized


async def _newest_snapshot(node: Any) -> tuple[Any, Any, int] | None:
    store = node.keeper.store
    latest = store.latest_id()
    if latest is None:
        return None
    return latest, store.load(latest), node.high_watermark


def _materializable_from(node: Any) -> int:
    """The lowest offset the tables can be materialized from: the log's start, or where the
    observer's state holds every outcome (read off the loop: two ints)."""
    return int(max(node.log.start_offset(), node.keeper.state.outcomes_from))


def bootstrap_if_needed(
    node: Any, loop: asyncio.AbstractEventLoop, materializer: Any, resume: int,
    progress: Callable[[str], None],
) -> bool:
    """Bootstrap the tables if the observer's log starts after ``resume``; True if it did."""
    from kraft_spark.delta.bootstrap import bootstrap_from_snapshot

    if node is None or resume >= _materializable_from(node):
        return False
    with _lock:
        resume = materializer.resume_offset()
        needed = _materializable_from(node)
        if resume >= needed:
            return False  # the other materializer thread did it
        gone = (f"the quorum's log now starts at {node.log.start_offset()}"
                if needed == node.log.start_offset() else
                f"the observer's state knows the outcomes of conditional writes from offset "
                f"{needed} on only (its snapshot kept the outcome window)")
        found = asyncio.run_coroutine_threadsafe(_newest_snapshot(node), loop).result(60)
        if found is None or found[0].offset < needed:
            log.error("%s, after offset %d, and the observer holds no snapshot at or after %d "
                      "yet: waiting for one", gone, resume, needed)
            return False
        snapshot_id, content, high_watermark = found
        progress(
            f"{gone}: offsets {resume}..{snapshot_id.offset - 1} cannot be materialized; "
            f"bootstrapping the Delta tables from snapshot {snapshot_id.offset}-"
            f"{snapshot_id.epoch} ({len(content.entries)} keys)"
        )
        bootstrap_from_snapshot(materializer, snapshot_id, content.entries,
                                max(high_watermark, snapshot_id.offset))
        return True
