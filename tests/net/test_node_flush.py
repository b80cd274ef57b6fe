"""Group commit (``kraft_spark.net.node_flush.GroupCommit``) on its own: a log that records its
flushes stands in for the node's segmented log, the callables for the node. The real log and
node are ``test_node.py``'s (both ways, on the loop and on the disk thread)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest

from kraft_spark.log.segmented_log import SegmentedLog
from kraft_spark.net.node_flush import GroupCommit
from kraft_spark.net.stats import NodeStats


class RecordingLog:
    """begin / sync / end of each flush, in order; ``sync_s``: how long each fsync takes."""

    def __init__(self, sync_s: float = 0.0, fail_on: int | None = None) -> None:
        self.calls: list[str] = []
        self.sync_s = sync_s
        self.fail_on = fail_on
        self.tickets = 0

    def begin_flush(self) -> int:
        self.tickets += 1
        self.calls.append(f"begin {self.tickets}")
        return self.tickets

    def sync_flush(self, ticket: int) -> None:
        if ticket == self.fail_on:
            raise OSError(5, "Input/output error")
        time.sleep(self.sync_s)
        self.calls.append(f"sync {ticket}")

    def end_flush(self, ticket: int) -> None:
        self.calls.append(f"end {ticket}")


class Host:
    """The node's side: counts flushes it was told of, and may want another from inside."""

    def __init__(self, log: RecordingLog, *, inline_max_ms: float, more: int = 0) -> None:
        self.log = log
        self.more = more  # how many times the "core" asks for another flush when told
        self.flushed = 0
        self.failures: list[BaseException] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.stats = NodeStats()
        self.worker = ThreadPoolExecutor(1)
        self.commit = GroupCommit(
            log=lambda: cast(SegmentedLog, self.log), stopping=lambda: False,
            flushed=self.on_flushed, fail=self.failures.append, spawn=self.spawn,
            worker=self.worker, inline_max_ms=inline_max_ms, stats=self.stats,
        )

    def on_flushed(self) -> None:
        self.flushed += 1
        if self.more:
            self.more -= 1
            self.commit.want()  # nested, as a core's next Ready would

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(coro, name=name))


@pytest.mark.loop_free
def test_a_fast_disk_flushes_on_the_loop_one_at_a_time() -> None:
    host = Host(RecordingLog(), inline_max_ms=5.0, more=2)
    host.commit.want()
    # Three flushes, each ended before the next began (a want during one rides the next),
    # none on the worker thread.
    assert host.log.calls == ["begin 1", "sync 1", "end 1", "begin 2", "sync 2", "end 2",
                              "begin 3", "sync 3", "end 3"]
    assert (host.flushed, host.stats.flushes, host.tasks) == (3, 3, [])
    host.worker.shutdown()


def test_a_slow_disk_moves_the_flushes_to_the_worker_thread() -> None:
    async def run() -> Host:
        host = Host(RecordingLog(sync_s=0.01), inline_max_ms=1.0, more=2)
        host.commit.want()  # the first runs inline: nothing measured the disk yet
        assert host.flushed == 1 and len(host.tasks) == 1  # 10 ms measured: the rest moves
        host.commit.want()  # while the worker's loop runs: it takes this one along
        await asyncio.gather(*host.tasks)
        return host

    host = asyncio.run(run())
    assert host.log.calls.count("end 2") == 1 and host.log.calls[-1] == "end 3"
    assert host.flushed == 3 and host.commit.avg_s > 0.001
    host.worker.shutdown()


@pytest.mark.loop_free
def test_a_failed_fsync_is_fatal_and_tells_nobody_it_is_durable() -> None:
    host = Host(RecordingLog(fail_on=1), inline_max_ms=5.0)
    host.commit.want()
    assert [str(exc) for exc in host.failures] == ["[Errno 5] Input/output error"]
    assert host.flushed == 0 and "end 1" not in host.log.calls
    host.worker.shutdown()
