"""``POST /v1/app/voters``: resize the running Spark application's quorum (KIP-853), served by
the application's HTTP endpoint (behind its bearer token); ``kraft-spark resize`` calls it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from api.models import ApiError


class ResizeIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    voters: int = Field(description="the voter count to reach (1..5 live)")


class ResizeOut(BaseModel):
    voters: int
    # "from" is a keyword in Python
    previous: int = Field(alias="from")
    change: str = Field(description="started, or none when the count is already the target")


def resize_router(resize: Callable[[int], dict[str, Any]]) -> APIRouter:
    router = APIRouter(tags=["application"])

    @router.post("/v1/app/voters", response_model=ResizeOut, response_model_by_alias=True,
                 status_code=202,
                 summary="Resize the quorum: a new generation of voter tasks, KIP-853 changes")
    def resize_voters(body: ResizeIn) -> dict[str, Any]:
        try:
            return resize(body.voters)
        except ValueError as exc:
            raise ApiError(422, str(exc)) from None

    return router
