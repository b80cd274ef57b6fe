"""The append coalescer: many concurrent appends share batches, each keeps its own contiguous
offsets and its own outcome. The sender here is an in-process log that records every batch it
is handed (the real network path is covered by tests/integration/test_http.py)."""

from __future__ import annotations

import asyncio

import pytest

from kraft_spark.client.coalesce import AppendCoalescer, sending
from kraft_spark.client.errors import ClientError, CommitTimeoutError, RecordTooLargeError
from kraft_spark.client.types import AppendResult
from kraft_spark.raft.records import Record


def rec(key: str, value: bytes = b"v") -> Record:
    return Record(key=key.encode(), value=value, timestamp_ms=0, headers=())


class Log:
    """Appends each batch atomically; ``gate`` holds sends until it is set."""

    def __init__(self, refuse_value: bytes | None = None, fail: Exception | None = None) -> None:
        self.records: list[Record] = []
        self.batches: list[tuple[Record, ...]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.refuse_value = refuse_value
        self.fail = fail

    async def send(self, records: tuple[Record, ...], timeout_s: float) -> AppendResult:
        await self.gate.wait()
        self.batches.append(records)
        if self.fail is not None:
            raise self.fail
        if any(r.value == self.refuse_value for r in records):
            raise RecordTooLargeError("too large")
        base = len(self.records)
        self.records.extend(records)
        return AppendResult(base, len(self.records) - 1, 7)


def test_one_append_goes_out_alone_and_at_once() -> None:
    async def main() -> None:
        log = Log()
        result = await AppendCoalescer(sending(log.send)).append((rec("a"), rec("b")), 1.0)
        assert result == AppendResult(0, 1, 7)
        assert [len(b) for b in log.batches] == [2]

    asyncio.run(main())


def test_appends_waiting_for_a_busy_sender_share_one_batch_with_their_own_offsets() -> None:
    async def main() -> None:
        log = Log()
        log.gate.clear()
        co = AppendCoalescer(sending(log.send), max_in_flight=1)
        first = asyncio.ensure_future(co.append((rec("first"),), 1.0))
        await asyncio.sleep(0)
        rest = [asyncio.ensure_future(co.append(tuple(rec(f"k{i}-{j}") for j in range(i + 1)),
                                                1.0)) for i in range(5)]
        await asyncio.sleep(0)
        log.gate.set()
        results = await asyncio.gather(first, *rest)
        # The first went alone; the five waiting ones went together as one batch of 15.
        assert [len(b) for b in log.batches] == [1, 15]
        assert (co.batches_sent, co.appends_sent) == (2, 6)
        for i, result in enumerate(results[1:]):
            got = log.records[result.base_offset:result.last_offset + 1]
            assert [r.key for r in got] == [f"k{i}-{j}".encode() for j in range(i + 1)]
            assert result.epoch == 7
        assert results[0] == AppendResult(0, 0, 7)

    asyncio.run(main())


def test_a_refused_shared_batch_is_resent_one_append_at_a_time() -> None:
    async def main() -> None:
        log = Log(refuse_value=b"bad")
        log.gate.clear()
        co = AppendCoalescer(sending(log.send), max_in_flight=1)
        first = asyncio.ensure_future(co.append((rec("x"),), 1.0))
        await asyncio.sleep(0)
        good = asyncio.ensure_future(co.append((rec("good"),), 1.0))
        bad = asyncio.ensure_future(co.append((rec("bad", b"bad"),), 1.0))
        also = asyncio.ensure_future(co.append((rec("also"),), 1.0))
        await asyncio.sleep(0)
        log.gate.set()
        await first
        assert (await good).base_offset == 1
        with pytest.raises(RecordTooLargeError):
            await bad
        assert (await also).base_offset == 2
        assert [r.key for r in log.records] == [b"x", b"good", b"also"]

    asyncio.run(main())


def test_an_unknown_outcome_is_shared_by_every_append_of_the_batch() -> None:
    async def main() -> None:
        log = Log(fail=CommitTimeoutError("not confirmed"))
        log.gate.clear()
        co = AppendCoalescer(sending(log.send), max_in_flight=1)
        tasks = [asyncio.ensure_future(co.append((rec(f"k{i}"),), 1.0)) for i in range(4)]
        await asyncio.sleep(0)
        log.gate.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(o, CommitTimeoutError) for o in outcomes)
        # The first went at once; the three after it in that loop turn shared the next batch.
        assert [len(b) for b in log.batches] == [1, 3]

    asyncio.run(main())


def test_batches_respect_the_size_and_count_limits() -> None:
    async def main() -> None:
        log = Log()
        log.gate.clear()
        co = AppendCoalescer(sending(log.send), max_in_flight=1, max_batch_bytes=1000,
                             max_batch_records=3)
        first = asyncio.ensure_future(co.append((rec("0"),), 1.0))
        await asyncio.sleep(0)
        small = [asyncio.ensure_future(co.append((rec(f"s{i}"),), 1.0)) for i in range(4)]
        big = asyncio.ensure_future(co.append((rec("big", b"x" * 2000),), 1.0))
        await asyncio.sleep(0)
        log.gate.set()
        await asyncio.gather(first, *small, big)
        # 3 records max per batch; an append over the byte limit still goes, alone.
        assert [len(b) for b in log.batches] == [1, 3, 1, 1]
        assert log.batches[-1][0].key == b"big"

    asyncio.run(main())


def test_a_cancelled_waiting_append_is_not_sent_and_close_fails_the_rest() -> None:
    async def main() -> None:
        log = Log()
        log.gate.clear()
        co = AppendCoalescer(sending(log.send), max_in_flight=1)
        first = asyncio.ensure_future(co.append((rec("first"),), 1.0))
        await asyncio.sleep(0)
        gone = asyncio.ensure_future(co.append((rec("gone"),), 1.0))
        kept = asyncio.ensure_future(co.append((rec("kept"),), 1.0))
        await asyncio.sleep(0)
        gone.cancel()
        log.gate.set()
        await first
        await kept
        assert [r.key for r in log.records] == [b"first", b"kept"]
        log.gate.clear()
        stuck = asyncio.ensure_future(co.append((rec("stuck"),), 1.0))
        await asyncio.sleep(0)
        await co.close()
        with pytest.raises(ClientError, match="closed"):
            await stuck
        with pytest.raises(ClientError, match="closed"):
            await co.append((rec("late"),), 1.0)

    asyncio.run(main())
