"""A lease keep-alive or TimeToLive asked of the leader over the wire (LeaseCountdown,
kraft-spark's api key 10001; ``kraft_spark.store.lease_keepalive``), through an
``AsyncQuorumClient``'s leader discovery and retries: what a follower's or an observer's HTTP
and etcd APIs do with their callers' keep-alives."""

from __future__ import annotations

from kraft_spark.client.client import AsyncQuorumClient
from kraft_spark.client.errors import ClientError
from kraft_spark.protocol import wire_leases
from kraft_spark.store.lease_clock import CountdownAnswer, CountdownRequest, CountdownStatus


async def lease_countdown(client: AsyncQuorumClient, request: CountdownRequest
                          ) -> CountdownAnswer:
    """The leader's answer; a node that is not the leader (or could not confirm it leads) is
    left for another within the client's retry budget (then ``NoLeaderError``)."""
    api_key, version, body = wire_leases.request_to_wire(request)
    timeout_s = request.timeout_ms / 1000

    async def attempt(endpoint: tuple[str, int]) -> CountdownAnswer | None:
        reply = await client._request(endpoint, api_key, version, body, timeout_s + 1.0)
        try:
            answer = wire_leases.answer_from_wire(reply)
        except ValueError as exc:
            raise ClientError(f"LeaseCountdown: an answer this client does not know: {exc}"
                              ) from None
        if answer.status in (CountdownStatus.NOT_LEADER, CountdownStatus.TIMED_OUT):
            client._refused(endpoint, answer.leader_id)
            return None
        client._leader = endpoint
        return answer

    result: CountdownAnswer = await client._retry("lease countdown", attempt)
    return result
