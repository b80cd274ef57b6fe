"""Read-index batching (kraft_spark.store.read_batch): one request in flight at a time, and
a read never uses a request sent before it arrived."""

from __future__ import annotations

import asyncio

import pytest

from kraft_spark.store.read_batch import ReadIndexBatcher


def test_reads_share_the_next_request_never_an_earlier_one() -> None:
    async def body() -> None:
        answers: list[asyncio.Future[int]] = []

        async def fetch() -> int:
            answers.append(asyncio.get_running_loop().create_future())
            return await answers[-1]

        async def asked(n: int) -> None:
            for _ in range(20):
                if len(answers) >= n:
                    return
                await asyncio.sleep(0)
            raise AssertionError(f"request {n} was never sent")

        batcher = ReadIndexBatcher(fetch)
        first = asyncio.ensure_future(batcher.read_index(5))
        await asked(1)
        later = [asyncio.ensure_future(batcher.read_index(5)) for _ in range(10)]
        await asyncio.sleep(0)
        assert batcher.requests == 1  # the ten wait: the request in flight predates them
        answers[0].set_result(100)
        assert await first == 100
        await asked(2)
        assert batcher.requests == 2  # one request for all ten, sent after they arrived
        answers[1].set_result(120)
        assert await asyncio.gather(*later) == [120] * 10
        # A failure reaches the reads of its batch, and the next read asks again.
        failing = asyncio.ensure_future(batcher.read_index(5))
        await asked(3)
        answers[2].set_exception(RuntimeError("no leader"))
        with pytest.raises(RuntimeError, match="no leader"):
            await failing
        again = asyncio.ensure_future(batcher.read_index(5))
        await asked(4)
        answers[3].set_result(130)
        assert await again == 130 and batcher.requests == 4

    asyncio.run(body())
