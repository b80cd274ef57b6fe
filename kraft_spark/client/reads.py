"""The read index of a linearizable read, asked of the leader over the wire (ReadIndex,
kraft-spark's api key 10000; ``kraft_spark.raft.read_index``), through an
``AsyncQuorumClient``'s leader discovery and retries."""

from __future__ import annotations

from kraft_spark.client.client import _RETRIABLE, AsyncQuorumClient, _error_text
from kraft_spark.client.errors import ClientError
from kraft_spark.protocol import wire_reads
from kraft_spark.raft.messages import ErrorCode, ReadIndexRequest


async def read_index(client: AsyncQuorumClient, *, timeout_s: float = 5.0) -> tuple[int, int]:
    """(read offset, leader epoch): every write acknowledged before this call began lies
    below the offset. Follows the leader; raises ``NoLeaderError`` when no leader confirms
    within the client's retry budget."""
    timeout_ms = max(1, int(timeout_s * 1000))
    api_key, version, body = wire_reads.request_to_wire(ReadIndexRequest(timeout_ms))

    async def attempt(endpoint: tuple[str, int]) -> tuple[int, int] | None:
        reply = await client._request(endpoint, api_key, version, body, timeout_s + 1.0)
        answer = wire_reads.response_from_wire(reply)
        if int(answer.error) in _RETRIABLE:
            client._refused(endpoint, answer.leader_id)
            return None
        if answer.error != ErrorCode.NONE:
            raise ClientError(f"ReadIndex failed: {_error_text(int(answer.error))}")
        client._leader, client._leader_epoch = endpoint, answer.leader_epoch
        return answer.read_offset, answer.leader_epoch

    result: tuple[int, int] = await client._retry("read index", attempt)
    return result
