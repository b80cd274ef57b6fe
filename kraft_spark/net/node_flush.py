"""Group commit for ``RaftNode``: one log flush at a time, on the event loop while the disk is
fast (recent fsyncs average at most ``kraft.log.flush.inline.max.ms``), on the disk thread
once it is slow; appends that arrive during a flush ride the next one (see ``node``).

``GroupCommit`` owns its state (a flush running, one wanted, the recent fsync time); the node
hands it what it needs as callables and calls ``want()`` when a Ready asks for a flush."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kraft_spark.log.segmented_log import FlushTicket, SegmentedLog
from kraft_spark.net.stats import NodeStats


class GroupCommit:
    def __init__(
        self,
        *,
        log: Callable[[], SegmentedLog],
        stopping: Callable[[], bool],
        flushed: Callable[[], None],
        fail: Callable[[BaseException], None],
        spawn: Callable[[Coroutine[Any, Any, None], str], None],
        worker: ThreadPoolExecutor,
        inline_max_ms: float,
        stats: NodeStats,
    ) -> None:
        """``log``: the node's log now; ``stopping``: whether the node stops (no flush is
        started then); ``flushed``: called after each flush made the log durable (the node
        tells its core); ``fail``: a storage failure, fatal to the node; ``spawn``: runs the
        worker-thread loop as a task of the node; ``worker``: the node's disk thread."""
        self._log = log
        self._stopping = stopping
        self._flushed = flushed
        self._fail = fail
        self._spawn = spawn
        self._worker = worker
        self._inline_max_ms = inline_max_ms
        self._stats = stats
        self._flushing = False  # a flush loop runs (inline, or as the worker's task)
        self._wanted = False  # a Ready asked for a flush since the last one began
        self.avg_s = 0.0  # recent fsync duration (see _flushed_in)

    def want(self) -> None:
        """A Ready asked for a flush: start one now unless one runs (it takes this along)."""
        self._wanted = True
        if not self._flushing:
            self._flush_inline()

    def _disk_is_fast(self) -> bool:
        return self.avg_s * 1000 <= self._inline_max_ms

    def _flush_inline(self) -> None:
        """Group commit on the loop while the disk is fast: fsync here, then tell the core
        (which may want more); once it is slow, the worker thread takes over."""
        self._flushing = True
        try:
            while self._wanted and not self._stopping() and self._disk_is_fast():
                self._wanted = False
                try:
                    log = self._log()
                    ticket, started = log.begin_flush(), time.perf_counter()
                    if ticket is not None:
                        log.sync_flush(ticket)
                except Exception as exc:
                    self._fail(exc)
                    return
                if not self._flush_done(ticket, started):
                    return
        finally:
            self._flushing = False
        if self._wanted and not self._stopping():
            # Flagged now, not when the task starts: one flusher at a time (the log has one
            # ticket in flight), even if another Ready asks for a flush before it runs.
            self._flushing = True
            self._spawn(self._run_flushes(), "flush")

    async def _run_flushes(self) -> None:
        """Group commit on the worker thread: one flush at a time; whatever arrived meanwhile
        rides the next. The caller set ``_flushing``."""
        loop = asyncio.get_running_loop()
        try:
            while self._wanted and not self._stopping():
                self._wanted = False
                try:
                    log = self._log()
                    ticket, started = log.begin_flush(), time.perf_counter()
                    if ticket is not None:
                        await loop.run_in_executor(self._worker, log.sync_flush, ticket)
                except Exception as exc:
                    self._fail(exc)
                    return
                if not self._flush_done(ticket, started):
                    return
        finally:
            self._flushing = False

    def _flush_done(self, ticket: FlushTicket | None, started: float) -> bool:
        """After a flush's fsync: end it, then tell the node. False: the node failed."""
        if ticket is not None:
            try:
                self._log().end_flush(ticket)
            except Exception as exc:
                self._fail(exc)
                return False
            self._flushed_in(time.perf_counter() - started)
        self._flushed()
        return True

    def _flushed_in(self, seconds: float) -> None:
        self._stats.on_flush(seconds)
        # Moving average over roughly the last five flushes: one slow fsync moves the next
        # ones to the worker thread; a run of fast ones brings them back.
        self.avg_s += (seconds - self.avg_s) * 0.2


__all__ = ["GroupCommit"]
