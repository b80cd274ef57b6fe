"""Take long-lived record batches out of CPython's cyclic garbage collector.

The leader's tail cache (``tail_cache``) keeps the last ~8 MiB of batches as objects: under
load that is 100,000-180,000 ``Record`` objects, 70-90 % of everything the collector walks in
a young-to-older or full collection, each of which holds the event loop (15-60 ms of CPU, over
150 ms of wall time measured on a busy 2-core machine: the 256-connection p99).

A ``Record`` or ``Batch`` holds only bytes, ints and tuples of them, so it can never be part of a
reference cycle and reference counting alone frees it: the collector gains nothing by walking
it. ``untrack_batch`` (C, ``_gc_untrack.c``) checks that shape itself, object by object, and
untracks only what passes. Without the C extension it does nothing (correct, just slower).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kraft_spark.raft.records import Batch, Record

log = logging.getLogger(__name__)


def _load() -> Callable[[Batch, type, type], int] | None:
    try:
        from kraft_spark.log import _gc_untrack
    except ImportError as exc:
        log.info("garbage-collector helper unavailable (%s): cached batches stay tracked", exc)
        return None
    fn: Callable[[Batch, type, type], int] = _gc_untrack.untrack_batch
    return fn


_untrack = _load()
AVAILABLE = _untrack is not None


def untrack_batch(batch: Batch) -> int:
    """Untrack ``batch``, its records tuple and its records when none can be part of a cycle;
    returns how many objects were untracked (0 without the C extension)."""
    if _untrack is None:
        return 0
    return _untrack(batch, Batch, Record)


__all__ = ["AVAILABLE", "untrack_batch"]
