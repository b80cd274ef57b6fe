"""KIP-853 from the client: AddRaftVoter and RemoveRaftVoter sent to the leader (found and
followed like any request), answered once the change commits."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from kraft_spark.client.errors import ClientError
from kraft_spark.protocol import ErrorCode, wire_voters
from kraft_spark.raft.messages import AddVoterRequest, RemoveVoterRequest
from kraft_spark.raft.voter_set import Endpoint

# Answers that mean "ask the leader" (this node is not it, or the quorum is electing one).
_NOT_LEADER = {ErrorCode.NOT_LEADER_OR_FOLLOWER}


class VoterChangeError(ClientError):
    """The leader refused the change; ``code`` is Kafka's error code, the message its reason."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class VoterChangesMixin:
    """Mixed into ``AsyncQuorumClient`` (which provides ``_retry``, ``_request``, ``_refused``,
    ``describe_quorum``, ``_leader`` and ``cluster_id``)."""

    cluster_id: str
    _leader: tuple[str, int] | None

    async def describe_quorum(self) -> Any:
        raise NotImplementedError

    async def _retry(self, what: str, attempt: Any, *, budget_s: float | None = None) -> Any:
        raise NotImplementedError

    async def _request(self, endpoint: tuple[str, int], api_key: int, version: int,
                       body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        raise NotImplementedError

    def _refused(self, endpoint: tuple[str, int], leader_id: int) -> None:
        raise NotImplementedError

    async def add_voter(self, voter_id: int, directory_id: uuid.UUID,
                        endpoints: tuple[Endpoint, ...], *, timeout_s: float = 30.0,
                        target: tuple[int, ...] = ()) -> None:
        """Make the observer ``voter_id`` (fetching with ``directory_id``) a voter; returns
        once the change is committed. Raises ``VoterChangeError`` with Kafka's code.
        ``target``: the voter set a reassignment moves to (shown by DescribeQuorum)."""
        request = AddVoterRequest(self.cluster_id or None, int(timeout_s * 1000), voter_id,
                                  directory_id, endpoints, target)
        await self._change(request, f"add voter {voter_id}", timeout_s)

    async def remove_voter(self, voter_id: int, directory_id: uuid.UUID, *,
                           timeout_s: float = 30.0, target: tuple[int, ...] = ()) -> None:
        request = RemoveVoterRequest(self.cluster_id or None, voter_id, directory_id, target)
        await self._change(request, f"remove voter {voter_id}", timeout_s)

    async def _change(self, request: AddVoterRequest | RemoveVoterRequest, what: str,
                      timeout_s: float) -> None:
        api_key, version, body = wire_voters.request_to_wire(request)
        if self._leader is None:
            # AddRaftVoter's and RemoveRaftVoter's answers name no leader: find it first with
            # DescribeQuorum, whose answers do (a client given one follower would otherwise
            # never reach it).
            with contextlib.suppress(ClientError):
                await self.describe_quorum()

        async def attempt(endpoint: tuple[str, int]) -> bool | None:
            reply = await self._request(endpoint, api_key, version, body, timeout_s + 5)
            code = reply.get("error_code", 0)
            if code in _NOT_LEADER:
                self._refused(endpoint, -1)
                return None
            if code:
                try:
                    name = ErrorCode(code).name
                except ValueError:
                    name = f"error {code}"
                raise VoterChangeError(code, f"{what} refused: {name}: "
                                             f"{reply.get('error_message') or 'no reason given'}")
            return True

        await self._retry(what, attempt, budget_s=timeout_s)
