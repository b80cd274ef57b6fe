"""The blocking client: an ``AsyncQuorumClient`` on a private event-loop thread, for code that
is not itself asynchronous (scripts, tests, the Spark driver's threads)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from kraft_spark import aio
from kraft_spark.client.client import AsyncQuorumClient
from kraft_spark.client.types import AppendResult, CommittedRecord, NewRecord, QuorumInfo
from kraft_spark.raft.voter_set import Endpoint

T = TypeVar("T")


class QuorumClient:
    """The blocking form: runs an ``AsyncQuorumClient`` on a private event-loop thread."""

    def __init__(self, bootstrap: Sequence[str] | str, **kwargs: Any) -> None:
        self._loop = aio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="quorum-client", daemon=True
        )
        self._thread.start()

        async def make() -> AsyncQuorumClient:
            return AsyncQuorumClient(bootstrap, **kwargs)

        self._client = self._call(make())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def cluster_id(self) -> str:
        return self._client.cluster_id

    def append(self, records: Sequence[NewRecord], *, timeout_s: float = 10.0,
               idempotency_key: str | None = None) -> AppendResult:
        return self._call(self._client.append(records, timeout_s=timeout_s,
                                              idempotency_key=idempotency_key))

    def read(self, from_offset: int, limit: int = 100) -> list[CommittedRecord]:
        return self._call(self._client.read(from_offset, limit))

    def describe_quorum(self) -> QuorumInfo:
        return self._call(self._client.describe_quorum())

    def leader_views(self, timeout_s: float = 1.0) -> dict[str, tuple[int, int]]:
        return self._call(self._client.leader_views(timeout_s))

    def add_voter(self, voter_id: int, directory_id: uuid.UUID,
                  endpoints: tuple[Endpoint, ...], *, timeout_s: float = 30.0) -> None:
        self._call(self._client.add_voter(voter_id, directory_id, endpoints,
                                          timeout_s=timeout_s))

    def remove_voter(self, voter_id: int, directory_id: uuid.UUID, *,
                     timeout_s: float = 30.0) -> None:
        self._call(self._client.remove_voter(voter_id, directory_id, timeout_s=timeout_s))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self._client.close())
        aio.stop_thread_loop(self._loop, self._thread)

    def __enter__(self) -> QuorumClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
