"""``POST /v1/quorum/voters`` and ``DELETE /v1/quorum/voters/{id}``: KIP-853 voter changes over
HTTP (what ``kafka-metadata-quorum.sh add-controller`` / ``remove-controller`` do over Kafka's
protocol). Behind the bearer token like every route; answered once the change commits."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from api.appends import client_error
from api.models import ApiError, QuorumBackend
from kraft_spark.client import ClientError
from kraft_spark.client.voter_changes import VoterChangeError
from kraft_spark.protocol import ErrorCode
from kraft_spark.raft.voter_set import Endpoint, parse_directory

_ENDPOINT = re.compile(r"^([A-Za-z0-9_.-]+)://(\[[^\]]+\]|[^:/\[\]]+):(\d{1,5})$")
# Kafka's codes for a refused change, as HTTP statuses.
_STATUS: dict[int, int] = {
    ErrorCode.DUPLICATE_VOTER: 409,
    ErrorCode.VOTER_NOT_FOUND: 404,
    ErrorCode.INVALID_REQUEST: 422,
    ErrorCode.INCONSISTENT_CLUSTER_ID: 422,
    ErrorCode.REQUEST_TIMED_OUT: 409,  # another change pending, or the node lags: retry later
    ErrorCode.UNSUPPORTED_VERSION: 422,
}


@runtime_checkable
class VoterAdmin(Protocol):
    async def add_voter(self, voter_id: int, directory_id: uuid.UUID,
                        endpoints: tuple[Endpoint, ...], *, timeout_s: float = ...) -> None: ...

    async def remove_voter(self, voter_id: int, directory_id: uuid.UUID, *,
                           timeout_s: float = ...) -> None: ...


class VoterIn(BaseModel):
    """The observer to make a voter: its id, its meta.properties directory.id, its listeners."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: int = Field(ge=0, description="node.id of the new voter")
    directoryId: str = Field(description="directory.id of its meta.properties (22 characters)")
    endpoints: list[str] = Field(min_length=1, description="listeners, NAME://host:port",
                                 examples=[["CONTROLLER://127.0.0.1:9094"]])


class VoterChangeOut(BaseModel):
    change: str
    voterId: int
    directoryId: str


def parse_endpoint(text: str) -> Endpoint:
    match = _ENDPOINT.match(text.strip())
    if match is None or not 0 < int(match.group(3)) < 65536:
        raise ApiError(422, f"invalid endpoint {text!r}: expected NAME://host:port, e.g. "
                            "CONTROLLER://127.0.0.1:9094")
    return Endpoint(match.group(1), match.group(2).strip("[]"), int(match.group(3)))


def _directory(text: str) -> uuid.UUID:
    try:
        return parse_directory(text)
    except ValueError as exc:
        raise ApiError(422, str(exc)) from None


def _change_error(exc: ClientError) -> ApiError:
    if isinstance(exc, VoterChangeError):
        return ApiError(_STATUS.get(exc.code, 502), str(exc))
    return client_error(exc)


def voters_router(current_backend: Callable[[], QuorumBackend],
                  errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    router = APIRouter(tags=["quorum"])

    def admin() -> VoterAdmin:
        backend = current_backend()
        if not isinstance(backend, VoterAdmin):
            raise ApiError(501, "this front end cannot change the voters: use "
                                "kraft-spark metadata-quorum add-controller / remove-controller")
        return backend

    @router.post("/v1/quorum/voters", response_model=VoterChangeOut,
                 responses={k: errors[k] for k in (401, 403, 422, 503)},
                 summary="Add a voter (KIP-853 AddRaftVoter); returns once committed")
    async def add_voter(voter: VoterIn) -> VoterChangeOut:
        directory = _directory(voter.directoryId)
        endpoints = tuple(parse_endpoint(e) for e in voter.endpoints)
        try:
            await admin().add_voter(voter.id, directory, endpoints)
        except ClientError as exc:
            raise _change_error(exc) from None
        return VoterChangeOut(change="added", voterId=voter.id, directoryId=voter.directoryId)

    @router.delete("/v1/quorum/voters/{voter_id}", response_model=VoterChangeOut,
                   responses={k: errors[k] for k in (401, 403, 422, 503)},
                   summary="Remove a voter (KIP-853 RemoveRaftVoter); returns once committed")
    async def remove_voter(
        voter_id: int,
        directory_id: str | None = Query(None, alias="directoryId", description=(
            "its directory id; default: the one the quorum lists for it")),
    ) -> VoterChangeOut:
        backend = admin()
        if directory_id is None:
            try:
                info = await current_backend().describe_quorum()
            except ClientError as exc:
                raise client_error(exc) from None
            known = {v.replica_id: v.directory_id for v in info.voters}
            if voter_id not in known:
                raise ApiError(404, f"{voter_id} is not a voter (voters: {sorted(known)})")
            directory_id = known[voter_id] or "AAAAAAAAAAAAAAAAAAAAAA"
        try:
            await backend.remove_voter(voter_id, _directory(directory_id))
        except ClientError as exc:
            raise _change_error(exc) from None
        return VoterChangeOut(change="removed", voterId=voter_id, directoryId=directory_id)

    return router
