"""``NodeBackend``: the ``api.app.QuorumBackend`` of the HTTP API embedded in a node.

**Appends.** When this node leads, an append goes straight into its core: ``RaftNode.
submit_local`` hands the core a ``ProduceRequest`` and the core's ``ProduceResponse`` (once
committed) resolves a future. Appends that arrive together (in the same loop iteration, or
while ``max_in_flight`` batches are waiting for their commit) share one ``ProduceRequest``
through the client's ``AppendCoalescer``; each keeps its own contiguous slice of offsets.

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

**Reads and DescribeQuorum.** On the leader they are answered by the local core (a client
Fetch, committed records only; DescribeQuorum), else, or when leadership moved meanwhile, by the
forwarding client; both are read-only, so falling back is always safe.

The error types are the client's (``kraft_spark.client.errors``), so the HTTP app maps them as
it does for the sidecar: 503 no leader, 504 commit not confirmed, 413/422 refused records.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from kraft_spark.client.client import AsyncQuorumClient, committed_records
from kraft_spark.client.coalesce import AppendCoalescer
from kraft_spark.client.errors import (
    ClientError,
    CommitTimeoutError,
    InvalidRecordError,
    RecordTooLargeError,
)
from kraft_spark.client.types import (
    AppendResult,
    CommittedRecord,
    NewRecord,
    QuorumInfo,
    ReplicaInfo,
)
from kraft_spark.net.node import LocalRequest, NodeStoppedError
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
from kraft_spark.raft.records import Record

if TYPE_CHECKING:
    from kraft_spark.net.node import RaftNode

# Batches handed to the local core at once, each waiting for its commit; appends beyond wait
# and then share one batch. Local hand-over is cheap, so this is well above the client's 4.
DEFAULT_MAX_IN_FLIGHT: Final = 16
# How long forwarding keeps looking for a leader for reads and DescribeQuorum (appends use
# their own timeout), as the stand-alone sidecar does.
FORWARD_RETRY_BUDGET_S: Final = 5.0
READ_MAX_BYTES: Final = 4 * 1024 * 1024
# Past the append's own timeout (which the core enforces), a last guard against a stuck wait.
LOCAL_WAIT_MARGIN_S: Final = 2.0


def produce_result(response: Response) -> AppendResult:
    """The outcome of a Produce handed to the local core while it led, in the client's terms.

    Only refusals for the batch's content mean nothing was appended; every other failure
    leaves the outcome unknown (``CommitTimeoutError``: never retried here)."""
    if not isinstance(response, ProduceResponse):
        raise ClientError(f"append failed: unexpected answer {type(response).__name__}")
    error = response.error
    if error == ErrorCode.NONE:
        return AppendResult(response.base_offset, response.last_offset, response.epoch)
    message = response.message or error.name
    if error == ErrorCode.MESSAGE_TOO_LARGE:
        raise RecordTooLargeError(f"the quorum refused the batch: {message}")
    if error in (ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE):
        raise InvalidRecordError(f"the quorum refused the batch: {message}")
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT):
        raise CommitTimeoutError(
            f"the append was not confirmed ({error.name}: {message}); it may still commit: "
            "check with a read before appending it again"
        )
    raise ClientError(f"append failed: {error.name} ({int(error)}) ({message})")


def _replica(state: ReplicaState) -> ReplicaInfo:
    return ReplicaInfo(
        state.replica_id, state.log_end_offset, state.last_fetch_timestamp,
        state.last_caught_up_timestamp,
    )


class NodeBackend:
    """``QuorumBackend`` for ``node``'s embedded HTTP API; lives on the node's event loop."""

    def __init__(self, node: RaftNode, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self._node = node
        self._coalescer = AppendCoalescer(self._send_batch, max_in_flight=max_in_flight)
        self._client: AsyncQuorumClient | None = None
        self._closed = False
        # Counters for tests and diagnostics: batches handed to the local core / forwarded.
        self.local_batches = 0
        self.forwarded_batches = 0

    @property
    def cluster_id(self) -> str | None:
        return self._node.cluster_id or None

    @property
    def coalescer(self) -> AppendCoalescer:
        return self._coalescer

    def _forwarder(self) -> AsyncQuorumClient:
        if self._closed:
            raise ClientError("the node's HTTP API is shutting down")
        if self._client is None:
            cfg = self._node.config
            self._client = AsyncQuorumClient(
                [f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in cfg.voters.values()],
                cluster_id=self._node.cluster_id or None,
                retry_budget_s=FORWARD_RETRY_BUDGET_S,
                ssl_context=cfg.tls.client_context() if cfg.tls is not None else None,
                client_id=f"node-{cfg.node_id}-http",
                coalesce=True,
            )
        return self._client

    # ------------------------------------------------------------------ append

    async def append(
        self, records: Sequence[NewRecord], *, timeout_s: float = 10.0
    ) -> AppendResult:
        if not records:
            raise ValueError("append needs at least one record")
        if self._node.is_leader:
            now = int(time.time() * 1000)
            batch = tuple(
                Record(key=r.key, value=r.value, timestamp_ms=now, headers=r.headers)
                for r in records
            )
            return await self._coalescer.append(batch, timeout_s)
        self.forwarded_batches += 1
        return await self._forwarder().append(records, timeout_s=timeout_s)

    async def _send_batch(self, records: tuple[Record, ...], timeout_s: float) -> AppendResult:
        """The coalescer's sender: one (possibly shared) batch, into the local core if this
        node still leads, else forwarded (nothing was appended here)."""
        node = self._node
        if not node.is_leader:
            self.forwarded_batches += 1
            return await self._forwarder().append(
                [NewRecord(r.key, r.value, r.headers) for r in records], timeout_s=timeout_s
            )
        # No await between the leadership check above and the hand-over below.
        request = ProduceRequest(records, timeout_ms=max(1, int(timeout_s * 1000)))
        future = node.submit_local(request)
        self.local_batches += 1
        response = await self._wait_local(future, timeout_s + LOCAL_WAIT_MARGIN_S, request)
        return produce_result(response)

    async def _wait_local(
        self, future: asyncio.Future[Response], wait_s: float, request: LocalRequest
    ) -> Response:
        def expire() -> None:
            if not future.done():
                future.set_exception(TimeoutError())

        guard = asyncio.get_running_loop().call_later(wait_s, expire)
        try:
            return await future
        except (NodeStoppedError, TimeoutError) as exc:
            if isinstance(request, ProduceRequest):
                raise CommitTimeoutError(
                    f"the append was not confirmed ({exc or 'no answer in time'}); it may still "
                    "commit: check with a read before appending it again"
                ) from exc
            raise
        finally:
            guard.cancel()

    # ------------------------------------------------------------------ read, describe

    async def _ask_leader(self, request: LocalRequest) -> Response | None:
        """The local core's answer when this node leads; None: ask the forwarding client."""
        if not self._node.is_leader:
            return None
        try:
            future = self._node.submit_local(request)
            return await self._wait_local(future, FORWARD_RETRY_BUDGET_S, request)
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
            )
        return await self._forwarder().describe_quorum()

    async def close(self) -> None:
        self._closed = True
        await self._coalescer.close()
        client, self._client = self._client, None
        if client is not None:
            await client.close()


__all__ = ["DEFAULT_MAX_IN_FLIGHT", "NodeBackend", "produce_result"]
