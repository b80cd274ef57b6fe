"""The driver's side of starting fresh voters (executors/restore_disk.py has the voter's).

After each generation's hellos, ``release_voters`` decides for the voters whose disks are fresh
(formatted now: a new host, or a lost disk):

* some voter still holds a log: ``start`` (the fresh ones catch up from the leader, KIP-630,
  and the reconcile replaces them with KIP-853's remove and add);
* none does and the warehouse holds nothing: ``start-fresh`` (a new quorum);
* none does and the warehouse holds the quorum's data: the quorum is rebuilt from it: the
  driver first lets its materializer write everything its observer has (when the driver lived
  on), then builds the restore snapshot (``kraft_spark.warehouse.restore``), sends it to every
  voter, records the restore in ``quorum_events`` and starts the observer afresh;
* the warehouse cannot prove it holds everything committed: the application stops, naming what
  is missing (``RestoreRefused``); the voters are not started.

A voter that reported an unusable log directory stops the application with the cause and fix.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from driver.console import progress

log = logging.getLogger("kraft_spark.driver")

_lock = threading.Lock()
# How long the driver waits for its materializer to write what its observer holds.
CATCH_UP_S = 120.0


class CannotStart(RuntimeError):
    """The voters cannot be started; the message names the cause and the fix."""


def release_voters(app: Any, voters: dict[int, Any]) -> str:
    """Tell the fresh voters of ``voters`` (hellos) how to start; returns the decision
    (``none`` when no voter waits). Raises CannotStart."""
    broken = {v: h for v, h in voters.items() if h.get("error")}
    if broken:
        raise CannotStart("; ".join(
            f"voter {v} on {h.get('executor_host') or h.get('host')}: cannot use its log "
            f"directory under {h.get('log_dir')} ({h['error']})" for v, h in broken.items())
            + ": set kraft.voter.log.dir to a writable local directory on every executor host")
    fresh = sorted(v for v, h in voters.items() if h.get("fresh"))
    generation = max(int(h["generation"]) for h in voters.values())
    with _lock:
        # Two refollow threads may wait for the same generation (relaunches in quick
        # succession): its voters are told how to start once.
        if not fresh or app.released_generation >= generation:
            return "none"
        app.released_generation = generation
        return _release(app, voters, fresh)


def _release(app: Any, voters: dict[int, Any], fresh: list[int]) -> str:
    from kraft_spark.warehouse.location import WarehouseError
    from kraft_spark.warehouse.restore_plan import RestoreRefused

    control = app.control
    if len(fresh) < len(voters):
        for v in fresh:
            control.release(v, "start")
        return "start"
    try:
        # A new cluster's first voters start at once: waiting for Delta's warm-up (seconds)
        # to learn that an empty warehouse holds nothing would delay every first start.
        restored = None if app.new_cluster and not app._hw else _restore(app)
    except (RestoreRefused, WarehouseError) as exc:
        raise CannotStart(str(exc)) from exc
    if restored is None:
        for v in fresh:
            control.release(v, "start-fresh")
        return "start-fresh"
    header = (f"restore {restored.snapshot_id.offset} {restored.snapshot_id.epoch} "
              f"{len(restored.data)}")
    for v in fresh:
        control.release(v, header, restored.data)
    from kraft_spark.warehouse.restore import record_restore

    try:
        record_restore(app.spark, app.config.warehouse, app.cluster_id, restored,
                       {v: str(h["directory_id"]) for v, h in voters.items()})
    except Exception:  # the restore happened; its row is a record of it
        log.exception("the restore's quorum_events row could not be written")
    app.reset_observer = True
    return "restore"


def _restore(app: Any) -> Any:
    """The restore snapshot the warehouse supports (None: it holds nothing)."""
    from kraft_spark.warehouse.restore import build_restore, warehouse_plan

    app._delta_ready.wait()
    _let_materializer_catch_up(app)
    warehouse = app.config.warehouse
    plan = warehouse_plan(app.spark, warehouse, app.cluster_id)
    if plan is None:
        return None
    progress(f"no voter has a log: rebuilding the quorum from the warehouse {warehouse}: "
             f"{plan.describe()}")
    started = time.monotonic()
    observer = app._observer
    restored = build_restore(app.spark, warehouse, plan,
                             observer.core.epoch if observer is not None else 0)
    progress(f"restore snapshot {restored.snapshot_id.offset}-{restored.snapshot_id.epoch} "
             f"built in {time.monotonic() - started:.1f} s: {restored.keys} keys, "
             f"{restored.replayed_rows} records rows replayed, {len(restored.data)} bytes")
    return restored


def _let_materializer_catch_up(app: Any) -> None:
    """The voters are gone but the driver's observer may hold committed records the tables
    lack: wait (bounded) until every table holds all the observer knows is committed."""
    observer = app._observer
    if observer is None:
        return
    # The observer may have been restarted for this generation's endpoints and not know the
    # high watermark yet (no voter answers): the last one it reported counts too.
    target = max(observer.high_watermark, app._hw)
    deadline = time.monotonic() + CATCH_UP_S
    while time.monotonic() < deadline and app.fatal is None:
        try:
            if app._delta.resume_offset() >= target:
                return
        except Exception:
            log.warning("reading the tables' offsets failed", exc_info=True)
        time.sleep(0.2)
    log.warning("the tables did not reach the observer's high watermark %d within %.0f s",
                target, CATCH_UP_S)
