"""``NodeBackend``: the ``api.app.QuorumBackend`` of the HTTP API embedded in a node.

**Appends.** When this node leads, an append goes straight into its core: ``RaftNode.
submit_local`` hands the core a ``ProduceRequest`` and the core's ``ProduceResponse`` (once
committed) settles it. Appends that arrive together (in the same loop iteration, or while
``max_in_flight`` batches are waiting for their commit) share one ``ProduceRequest`` through
the client's own ``AppendCoalescer``, handing batches over with ``LeaderHandOver``; each keeps
its own contiguous slice of offsets.

When this node does not lead, the append is forwarded to the leader through an
``AsyncQuorumClient`` (bootstrap: the voters; created lazily on the node's loop), which finds
the leader, follows leader changes and retries exactly-once with its producer sequences.

**Leadership changes.** Leadership is checked synchronously right before a batch is handed to
the core (no ``await`` in between), so the core appends it or refuses it for its content
(too large, invalid), never for want of leadership. A batch found on a non-leader before it
was handed over is forwarded: nothing was appended. Once handed over, the outcome of an append
whose leader then lost leadership (NOT_LEADER_OR_FOLLOWER), that timed out (REQUEST_TIMED_OUT)
or whose node stopped is unknown (it is in this log and may still commit under the next
leader), so it fails with ``CommitTimeoutError`` (HTTP 504) and is never sent again: a retry
could append it twice (local batches carry no producer id the next leader could deduplicate).

**Appends under an Idempotency-Key** go alone, never shared, under the key's own producer id
(``key_producer_id``) at sequence 0: the quorum's producer table answers any retry of the key
with the first offsets, so an unknown outcome here is sent on to the leader of now under the
same key instead of failing (``_append_keyed``).

**Reads and DescribeQuorum.** On the leader they are answered by the local core (a client
Fetch, committed records only; DescribeQuorum), else, or when leadership moved meanwhile, by the
forwarding client; both are read-only, so falling back is always safe.

The error types are the client's (``kraft_spark.client.errors``), so the HTTP app maps them as
it does for the sidecar: 503 no leader, 504 commit not confirmed, 413/422 refused records.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Final

from api.local_appends import LOCAL_WAIT_MARGIN_S, LeaderHandOver, produce_result
from kraft_spark.addresses import url_host
from kraft_spark.client.client import AsyncQuorumClient, committed_records
from kraft_spark.client.coalesce import AppendCoalescer
from kraft_spark.client.errors import (
    ClientError,
    CommitTimeoutError,
    OffsetBelowLogStartError,
    key_reused,
    snapshot_label,
)
from kraft_spark.client.timeouts import ClientTimeouts
from kraft_spark.client.types import (
    AppendRecord,
    AppendResult,
    CommittedRecord,
    QuorumInfo,
    ReplicaInfo,
    stamped,
)
from kraft_spark.net.local_requests import (
    LocalNode,
    LocalRequest,
    NodeStoppedError,
    local_answer,
)
from kraft_spark.raft.messages import (
    CLIENT_REPLICA_ID,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
    ReplicaState,
    Response,
)
from kraft_spark.raft.producers import key_producer_id
from kraft_spark.raft.records import Record
from kraft_spark.raft.voter_set import NIL_DIRECTORY, Endpoint, directory_text

# Batches handed to the local core at once, each waiting for its commit; appends beyond wait
# and then share one batch. Local hand-over is cheap, so this is well above the client's 4.
DEFAULT_MAX_IN_FLIGHT: Final = 16
READ_MAX_BYTES: Final = 4 * 1024 * 1024


def _replica(state: ReplicaState) -> ReplicaInfo:
    directory = state.directory_id
    return ReplicaInfo(
        state.replica_id, state.log_end_offset, state.last_fetch_timestamp,
        state.last_caught_up_timestamp,
        directory_text(directory) if directory != NIL_DIRECTORY else None,
    )


class NodeBackend:
    """``QuorumBackend`` for ``node``'s embedded HTTP API; lives on the node's event loop."""

    def __init__(self, node: LocalNode, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self._node = node
        # As long as the quorum's own settings say finding a leader may take (timeouts).
        self._timeouts = ClientTimeouts.for_quorum(node.config.quorum)
        self._hand_over = LeaderHandOver(node, self._forward_batch)
        self._appends = AppendCoalescer(self._hand_over, max_in_flight=max_in_flight,
                                        owner="the node's HTTP API")
        self._client: AsyncQuorumClient | None = None
        self._closed = False
        self._forwarded = 0  # appends forwarded because this node did not lead

    @property
    def cluster_id(self) -> str | None:
        return self._node.cluster_id or None

    @property
    def local_appends(self) -> AppendCoalescer:
        return self._appends

    # Counters for tests and diagnostics: batches handed to the local core / forwarded.
    @property
    def local_batches(self) -> int:
        return self._hand_over.batches_sent

    @property
    def forwarded_batches(self) -> int:
        return self._forwarded + self._hand_over.forwarded_batches

    def forwarder(self) -> AsyncQuorumClient:
        """The client that reaches the leader from this node (created on first use)."""
        return self._forwarder()

    def _forwarder(self) -> AsyncQuorumClient:
        if self._closed:
            raise ClientError("the node's HTTP API is shutting down")
        if self._client is None:
            cfg = self._node.config
            # Reads and DescribeQuorum look for a leader as long as the quorum's own settings
            # say an election may take (appends use their own timeout), as the sidecar does.
            self._client = AsyncQuorumClient(
                [f"{url_host(h)}:{p}" for h, p in cfg.voters.values()],
                cluster_id=self._node.cluster_id or None,
                **self._timeouts.client_kwargs(),
                ssl_context=cfg.client_ssl(),
                sasl=cfg.client_sasl,
                client_id=f"node-{cfg.node_id}-http",
                coalesce=True,
            )
        return self._client

    # ------------------------------------------------------------------ append

    async def append(
        self, records: Sequence[AppendRecord], *, timeout_s: float = 10.0,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        if not records:
            raise ValueError("append needs at least one record")
        if idempotency_key is not None:
            return await self._append_keyed(records, timeout_s, idempotency_key)
        if self._node.is_leader:
            return await self._appends.append(stamped(records), timeout_s)
        self._forwarded += 1
        return await self._forwarder().append(records, timeout_s=timeout_s)

    async def _append_keyed(self, records: Sequence[AppendRecord], timeout_s: float,
                            key: str) -> AppendResult:
        """An Idempotency-Key's append, alone under the key's producer id (never shared: the
        quorum's producer table dedupes its retries). Because a retry is safe, an outcome left
        unknown here (leadership lost, this node stopping, no answer in time) is not final: the
        same batch goes to whoever leads now, which answers the first append's offsets if it
        holds it, and appends it otherwise (then the first can never commit: it is in no log
        the new leader's log will keep)."""
        deadline = time.monotonic() + timeout_s
        if self._node.is_leader:
            request = ProduceRequest(
                stamped(records), timeout_ms=max(1, int(timeout_s * 1000)),
                producer_id=key_producer_id(key), producer_epoch=0, base_sequence=0)
            try:
                future = local_answer(self._node, request)
                response = await self._wait_local(future, timeout_s + LOCAL_WAIT_MARGIN_S,
                                                  request)
                if (isinstance(response, ProduceResponse)
                        and response.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
                    raise key_reused(key)
                return produce_result(response)
            except (NodeStoppedError, TimeoutError, CommitTimeoutError):
                pass  # outcome unknown: ask the leader of now, with the same key
        self._forwarded += 1
        return await self._forwarder().append(
            records, timeout_s=max(0.1, deadline - time.monotonic()), idempotency_key=key)

    async def _forward_batch(self, records: tuple[Record, ...], timeout_s: float) -> AppendResult:
        """A batch found waiting on a node that no longer leads: to the leader (nothing was
        appended here)."""
        return await self._forwarder().append_batch(records, timeout_s=timeout_s)

    async def _wait_local(
        self, future: asyncio.Future[Response], wait_s: float, request: LocalRequest
    ) -> Response:
        def expire() -> None:
            if not future.done():
                future.set_exception(TimeoutError())

        guard = asyncio.get_running_loop().call_later(wait_s, expire)
        try:
            return await future
        finally:
            guard.cancel()

    # ------------------------------------------------------------------ read, describe

    async def _ask_leader(self, request: LocalRequest) -> Response | None:
        """The local core's answer when this node leads; None: ask the forwarding client."""
        if not self._node.is_leader:
            return None
        try:
            future = local_answer(self._node, request)
            return await self._wait_local(future, self._timeouts.retry_budget_s, request)
        except (NodeStoppedError, TimeoutError):
            return None

    async def read(self, from_offset: int, limit: int = 100) -> list[CommittedRecord]:
        if from_offset < 0 or limit < 1:
            raise ValueError("from_offset must be ≥ 0 and limit ≥ 1")
        response = await self._ask_leader(FetchRequest(
            cluster_id=self._node.cluster_id,
            replica_id=CLIENT_REPLICA_ID,
            current_leader_epoch=-1,
            fetch_offset=from_offset,
            last_fetched_epoch=-1,
            max_wait_ms=0,
            max_bytes=READ_MAX_BYTES,
        ))
        if isinstance(response, FetchResponse):
            if response.error == ErrorCode.NONE:
                return committed_records(
                    response.batches, response.high_watermark, from_offset, limit
                )
            if response.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                if response.log_start_offset > from_offset:
                    raise OffsetBelowLogStartError(
                        from_offset, response.log_start_offset,
                        snapshot_label(response.snapshot_id),
                    )
                return []
        return await self._forwarder().read(from_offset, limit)

    async def describe_quorum(self) -> QuorumInfo:
        response = await self._ask_leader(DescribeQuorumRequest())
        if isinstance(response, DescribeQuorumResponse) and response.error == ErrorCode.NONE:
            return QuorumInfo(
                cluster_id=self._node.cluster_id,
                leader_id=response.leader_id,
                leader_epoch=response.leader_epoch,
                high_watermark=response.high_watermark,
                voters=tuple(_replica(v) for v in response.voters),
                observers=tuple(_replica(o) for o in response.observers),
                log_start_offset=response.log_start_offset,
                latest_snapshot=snapshot_label(response.latest_snapshot),
                endpoints={node_id: tuple(str(e) for e in ends)
                           for node_id, ends in response.endpoints},
            )
        return await self._forwarder().describe_quorum()

    # ------------------------------------------------------------------ voters (KIP-853)

    async def add_voter(self, voter_id: int, directory_id: uuid.UUID,
                        endpoints: tuple[Endpoint, ...], *, timeout_s: float = 30.0) -> None:
        await self._forwarder().add_voter(voter_id, directory_id, endpoints,
                                          timeout_s=timeout_s)

    async def remove_voter(self, voter_id: int, directory_id: uuid.UUID, *,
                           timeout_s: float = 30.0) -> None:
        await self._forwarder().remove_voter(voter_id, directory_id, timeout_s=timeout_s)

    async def close(self) -> None:
        self._closed = True
        await self._appends.close()
        client, self._client = self._client, None
        if client is not None:
            await client.close()


__all__ = ["DEFAULT_MAX_IN_FLIGHT", "NodeBackend"]
