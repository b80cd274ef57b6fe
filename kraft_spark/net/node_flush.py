"""Group commit for ``RaftNode``: one log flush at a time, on the event loop while the disk is
fast (recent fsyncs average at most ``kraft.log.flush.inline.max.ms``), on the disk thread
once it is slow; appends that arrive during a flush ride the next one (see ``node``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kraft_spark.log.segmented_log import FlushTicket, SegmentedLog
from kraft_spark.net.config import NodeConfig
from kraft_spark.net.reply_token import wall_ms
from kraft_spark.net.stats import NodeStats
from kraft_spark.raft.core import RaftCore


class GroupCommitMixin:
    """Mixed into ``RaftNode``, which owns the fields and the methods declared here."""

    config: NodeConfig
    stats: NodeStats
    _core: RaftCore | None
    _worker: ThreadPoolExecutor
    _flushing: bool
    _flush_wanted: bool
    _flush_avg_s: float
    _stopping: bool

    @property
    def log(self) -> SegmentedLog:
        raise NotImplementedError

    def _fail(self, exc: BaseException) -> None:
        raise NotImplementedError

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        raise NotImplementedError

    def _drain(self) -> None:
        raise NotImplementedError

    def _disk_is_fast(self) -> bool:
        return self._flush_avg_s * 1000 <= self.config.inline_flush_max_ms

    def _flush_inline(self) -> None:
        """Group commit on the loop while the disk is fast: fsync here, then tell the core
        (which may want more); once it is slow, the worker thread takes over."""
        self._flushing = True
        try:
            while self._flush_wanted and not self._stopping and self._disk_is_fast():
                self._flush_wanted = False
                try:
                    ticket, started = self.log.begin_flush(), time.perf_counter()
                    if ticket is not None:
                        self.log.sync_flush(ticket)
                except Exception as exc:
                    self._fail(exc)
                    return
                if not self._flush_done(ticket, started):
                    return
        finally:
            self._flushing = False
        if self._flush_wanted and not self._stopping:
            # Flagged now, not when the task starts: one flusher at a time (the log has one
            # ticket in flight), even if another Ready asks for a flush before it runs.
            self._flushing = True
            self._spawn(self._run_flushes(), "flush")

    async def _run_flushes(self) -> None:
        """Group commit on the worker thread: one flush at a time; whatever arrived meanwhile
        rides the next. The caller set ``_flushing``."""
        loop = asyncio.get_running_loop()
        try:
            while self._flush_wanted and not self._stopping:
                self._flush_wanted = False
                try:
                    ticket, started = self.log.begin_flush(), time.perf_counter()
                    if ticket is not None:
                        await loop.run_in_executor(self._worker, self.log.sync_flush, ticket)
                except Exception as exc:
                    self._fail(exc)
                    return
                if not self._flush_done(ticket, started):
                    return
        finally:
            self._flushing = False

    def _flush_done(self, ticket: FlushTicket | None, started: float) -> bool:
        """After a flush's fsync: end it, then tell the core. False: the node failed."""
        if ticket is not None:
            try:
                self.log.end_flush(ticket)
            except Exception as exc:
                self._fail(exc)
                return False
            self._flushed_in(time.perf_counter() - started)
        if self._core is not None and not self._stopping:
            self._core.on_log_flushed(wall_ms())
            self._drain()
        return True

    def _flushed_in(self, seconds: float) -> None:
        self.stats.on_flush(seconds)
        # Moving average over roughly the last five flushes: one slow fsync moves the next
        # ones to the worker thread; a run of fast ones brings them back.
        self._flush_avg_s += (seconds - self._flush_avg_s) * 0.2
