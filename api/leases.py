"""``/v1/leases``: grant, keep alive, revoke and list leases (``kraft_spark.store.leases``).

A grant or a revocation is a record in the log, answered once this node's state machine applied
it: ``POST /v1/leases {"ttl_ms": N}`` → ``{"lease_id", "ttl_ms"}``; ``DELETE /v1/leases/{id}``
deletes the lease and every key attached to it in one step. A keep-alive is not: ``POST
/v1/leases/{id}/keepalive`` → ``{"lease_id", "ttl_ms"}`` (404 once the lease expired or was
revoked) is answered by the leader's countdown once the leader confirmed it still leads
(``kraft_spark.store.lease_keepalive``), and so is ``GET /v1/leases/{id}`` (its time left).
``GET /v1/leases`` lists the leases in force with their keys. A write attaches its keys with
``"lease_id"`` beside ``"records"`` (``api.fast_append``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from api.appends import client_error
from api.conditional import no_store_error
from api.lease_writes import MAX_LEASE_ID
from api.middleware import identity_of
from api.models import ApiError, QuorumBackend
from kraft_spark.client.errors import ClientError, CommitTimeoutError
from kraft_spark.client.types import NewRecord
from kraft_spark.http_auth import Scope
from kraft_spark.state.outcomes import OutcomeUnknown
from kraft_spark.store.lease_clock import CountdownAnswer, CountdownRequest, CountdownStatus
from kraft_spark.store.leases import (
    LEASE_OP_HEADER,
    MAX_TTL_MS,
    MIN_TTL_MS,
    NOT_OWNER,
    Lease,
    encode_op,
)
from kraft_spark.store.service import KvStore, ReadTimeoutError

LeaseId = Annotated[int, Path(ge=1, le=MAX_LEASE_ID, description="The lease id.")]


class LeaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    ttl_ms: int = Field(ge=MIN_TTL_MS, le=MAX_TTL_MS, description="Time to live without a "
                        "keep-alive, in milliseconds.")
    lease_id: int | None = Field(default=None, ge=1, le=MAX_LEASE_ID,
                                 description="Choose the id (default: a random one).")


class LeaseOut(BaseModel):
    lease_id: int
    ttl_ms: int


class LeaseInfo(BaseModel):
    lease_id: int
    ttl_ms: int
    keys: list[str]
    granted_offset: int
    keepalive_offset: int = Field(description="Offset of its last keep-alive the log records: "
                                  "the grant, or a checkpoint cleared by a keep-alive (most "
                                  "keep-alives write nothing).")
    owner: str = Field(description="The name of the credential that granted it (empty on a "
                       "server without credentials): only it, or an admin, may keep it alive "
                       "or revoke it.")


class LeaseTimeToLive(LeaseInfo):
    remaining_ms: int = Field(description="Time left on the leader's countdown.")


class LeasesOut(BaseModel):
    leases: list[LeaseInfo]
    offset: int = Field(description="The answer reflects every committed write below this.")


def leases_router(backend: Callable[[], QuorumBackend], store_of: Callable[[], KvStore | None],
                  errors: dict[int | str, dict[str, Any]], commit_timeout_s: float
                  ) -> APIRouter:
    router = APIRouter(tags=["leases"])
    answers: dict[int | str, dict[str, Any]] = {
        k: errors[k] for k in (401, 403, 404, 409, 410, 422, 503, 504) if k in errors}

    def store() -> KvStore:
        found = store_of()
        if found is None:
            raise no_store_error()
        return found

    def caller(request: Request) -> dict[str, str]:
        """``by``: the caller's credential, which must own the lease; none for an admin (or a
        server without credentials), who may act on any lease."""
        identity = identity_of(request.scope)
        if identity is None or identity.scope >= Scope.ADMIN:
            return {}
        return {"by": identity.name}

    async def operate(op: str, lease_id: int, **fields: int | str) -> None:
        """Append one lease operation; raise its failure as the HTTP error."""
        kv = store()
        record = NewRecord(None, None, ((LEASE_OP_HEADER, encode_op(op, lease_id, **fields)),))
        try:
            result = await backend().append([record], timeout_s=commit_timeout_s)
            failure = await kv.outcome(result.base_offset, result.last_offset + 1,
                                       commit_timeout_s)
        except (CommitTimeoutError, ReadTimeoutError) as exc:
            raise ApiError(504, f"the lease {op} was not confirmed in time ({exc}); it may "
                                "still take effect: check GET /v1/leases") from None
        except ClientError as exc:
            raise client_error(exc) from None
        except OutcomeUnknown as exc:  # only if this node applied it a window late
            raise ApiError(410, f"the lease {op} committed at offset {result.base_offset}; "
                                f"{exc}: check GET /v1/leases") from None
        if failure is not None:
            status = (404 if "not found" in failure.reason
                      else 403 if NOT_OWNER in failure.reason else 409)
            raise ApiError(status, failure.reason or f"the lease {op} failed")

    @router.post("/v1/leases", response_model=LeaseOut, responses=answers,
                 summary="Grant a lease")
    async def grant(body: LeaseIn, request: Request) -> LeaseOut:
        # Random ids below 2**53: JSON numbers stay exact in every client (JavaScript too).
        lease_id = body.lease_id or secrets.randbits(52) + 1
        identity = identity_of(request.scope)
        owner = {"owner": identity.name} if identity is not None else {}
        await operate("grant", lease_id, ttl_ms=body.ttl_ms, **owner)
        return LeaseOut(lease_id=lease_id, ttl_ms=body.ttl_ms)

    async def countdown(lease_id: int, renew: bool, request: Request) -> CountdownAnswer:
        """The leader's countdown of the lease, renewed or only read; its failure as the HTTP
        error."""
        ask = CountdownRequest(lease_id, renew, caller(request).get("by"),
                               max(1, int(commit_timeout_s * 1000)))
        try:
            answer = await store().lease_countdown(ask)
        except ClientError as exc:
            raise client_error(exc) from None
        if answer.status is CountdownStatus.OK:
            return answer
        status = {CountdownStatus.NOT_FOUND: 404, CountdownStatus.NOT_OWNER: 403,
                  CountdownStatus.INVALID: 422, CountdownStatus.NOT_LEADER: 503,
                  }.get(answer.status, 504)
        raise ApiError(status, answer.message or f"the lease keep-alive failed "
                               f"({answer.status.name})")

    @router.post("/v1/leases/{lease_id}/keepalive", response_model=LeaseOut, responses=answers,
                 summary="Keep a lease alive for another TTL")
    async def keepalive(lease_id: LeaseId, request: Request) -> LeaseOut:
        answer = await countdown(lease_id, True, request)
        return LeaseOut(lease_id=lease_id, ttl_ms=answer.ttl_ms)

    @router.get("/v1/leases/{lease_id}", response_model=LeaseTimeToLive, responses=answers,
                summary="One lease, with the time left on the leader's countdown")
    async def time_to_live(lease_id: LeaseId, request: Request) -> LeaseTimeToLive:
        answer = await countdown(lease_id, False, request)
        try:
            _, leases = await store().leases(linearizable=False,
                                             timeout_s=commit_timeout_s, only=lease_id)
        except ReadTimeoutError as exc:
            raise ApiError(504, str(exc)) from None
        if not leases:  # expired or revoked since the leader answered
            raise ApiError(404, f"lease {lease_id} not found (expired or revoked)")
        return LeaseTimeToLive(**_info(leases[0]).model_dump(),
                               remaining_ms=answer.remaining_ms)

    @router.delete("/v1/leases/{lease_id}", response_model=LeaseOut, responses=answers,
                   summary="Revoke a lease and delete its keys")
    async def revoke(lease_id: LeaseId, request: Request) -> LeaseOut:
        await operate("revoke", lease_id, **caller(request))
        return LeaseOut(lease_id=lease_id, ttl_ms=0)

    @router.get("/v1/leases", response_model=LeasesOut, responses=answers,
                summary="The leases in force and their keys")
    async def list_leases(
        consistency: Annotated[str, Query(pattern="^(linearizable|serializable)$")]
        = "linearizable",
    ) -> LeasesOut:
        try:
            offset, leases = await store().leases(
                linearizable=consistency == "linearizable", timeout_s=commit_timeout_s)
        except ReadTimeoutError as exc:
            raise ApiError(504, str(exc)) from None
        except ClientError as exc:
            raise client_error(exc) from None
        return LeasesOut(offset=offset, leases=[_info(x) for x in leases])

    return router


def _info(lease: Lease) -> LeaseInfo:
    return LeaseInfo(lease_id=lease.lease_id, ttl_ms=lease.ttl_ms,
                     granted_offset=lease.granted_offset,
                     keepalive_offset=lease.keepalive_offset, owner=lease.owner,
                     keys=sorted(k.decode("utf-8", errors="replace") for k in lease.keys))
