"""``GET /v1/kv/{key}`` and ``GET /v1/kv?prefix=``: the store's reads by key (``NodeStore``).

Linearizable by default (the read index: the answer reflects every write acknowledged before
the read began); ``?consistency=serializable`` answers from this node's applied state at once
and says how far behind the node knows it is: ``X-Kraft-Known-Committed`` is the highest commit
offset it has heard of (the answer may miss the writes from ``X-Kraft-Offset`` up to it, and
whatever the leader committed since this node last heard from it). Every answer names the
offset it reflects, in the body (``offset``) and in the ``X-Kraft-Offset`` header: the state
holds every committed write below it. A key's revision is etcd's: ``create_offset`` (the write
that created it), ``mod_offset`` (its last write) and ``version`` (writes since it was
created).

Ranges are in byte order of the keys (UTF-8), ``limit`` per page; ``next_page_token`` (opaque)
continues after the last key of the page, each page a read of its own (like etcd's paginated
range without a fixed revision).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Annotated, Any, Final, Literal

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, Field

from api.appends import client_error
from api.models import RETRY_AFTER_S, ApiError
from api.values import SERVE_JSON, decode_value, value_json
from kraft_spark.client.errors import ClientError
from kraft_spark.state.machine import Entry
from kraft_spark.store.service import MAX_RANGE_LIMIT, KvRead, KvStore, ReadTimeoutError

OFFSET_HEADER: Final = "X-Kraft-Offset"
# The highest commit offset the answering node knows of (serializable reads may lag it).
COMMITTED_HEADER: Final = "X-Kraft-Known-Committed"
READ_TIMEOUT_S: Final = 5.0
Consistency = Literal["linearizable", "serializable"]


class KeyValueOut(BaseModel):
    key: str
    value: Any = Field(description="The stored JSON value.")
    create_offset: int = Field(description="Offset of the write that created the key (of a "
                                           "conditional write: its first record's).")
    mod_offset: int = Field(description="Offset of the key's last write (of a conditional "
                                        "write: its first record's).")
    version: int = Field(description="Writes since the key was created (1 after creation).")
    offset: int = Field(description="The answer reflects every committed write below this.")


class RangeOut(BaseModel):
    kvs: list[KeyValueOut]
    count: int
    offset: int = Field(description="The answer reflects every committed write below this.")
    next_page_token: str | None = Field(
        description="Pass as page_token for the next page; null on the last page.")


def key_value_out(key: bytes, entry: Entry, offset: int) -> KeyValueOut:
    return KeyValueOut(key=key.decode("utf-8", errors="replace"), value=decode_value(entry.value),
                       create_offset=entry.create_offset, mod_offset=entry.offset,
                       version=entry.version, offset=offset)


def key_value_json(key: bytes, entry: Entry, offset: int) -> bytes:
    """``KeyValueOut`` as JSON bytes."""
    return (f'{{"key":{SERVE_JSON(key.decode("utf-8", errors="replace"))},'
            f'"value":{value_json(entry.value)},"create_offset":{entry.create_offset},'
            f'"mod_offset":{entry.offset},"version":{entry.version},"offset":{offset}}}'
            ).encode()


def _page_token(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode("ascii").rstrip("=")


def _after_key(token: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise ApiError(422, "invalid page_token: pass the next_page_token of the previous "
                            "page unchanged") from None


def no_kv_store_error() -> ApiError:
    return ApiError(503, "this endpoint holds no copy of the store's state (it is a "
                         "forwarding sidecar): read from a node's HTTP API or the Spark "
                         "application's", {"Retry-After": RETRY_AFTER_S})


def read_error(exc: Exception) -> Exception:
    """The HTTP answer to a read that failed (an ApiError), or ``exc`` itself."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ReadTimeoutError):
        return ApiError(504, str(exc))
    if isinstance(exc, TimeoutError):
        return ApiError(504, f"the read was not confirmed within {READ_TIMEOUT_S:g} s: retry "
                             "(an election may be in progress)")
    if isinstance(exc, ClientError):
        return client_error(exc)
    return exc


async def key_answer(store: KvStore | None, key: bytes, *, linearizable: bool
                     ) -> tuple[bytes, dict[str, str]]:
    """The body and headers of ``GET /v1/kv/{key}``, for the route and its front door
    (``api.kv_front``) alike; the ApiError to answer otherwise (503, 504, 404...)."""
    if store is None:
        raise no_kv_store_error()
    try:
        result = await store.get(key, linearizable=linearizable, timeout_s=READ_TIMEOUT_S)
    except Exception as exc:
        raise read_error(exc) from None
    headers = {OFFSET_HEADER: str(result.offset), COMMITTED_HEADER: str(result.known_committed)}
    if not result.entries:
        text = key.decode("utf-8", errors="replace")
        raise ApiError(404, f"key {text!r} not found (as of offset {result.offset})", headers,
                       extra={"offset": result.offset})
    # Encoded here, not validated again by a response model: the hottest read path.
    return key_value_json(key, result.entries[0][1], result.offset), headers


def kv_router(store_provider: Callable[[], KvStore | None],
              errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    router = APIRouter(tags=["kv"])
    answers: dict[int | str, dict[str, Any]] = {
        k: errors[k] for k in (401, 403, 422, 503) if k in errors}
    answers[504] = {**errors.get(504, {}), "description": "The read was not confirmed in time "
                    "(no leader could prove it leads, or this node did not apply the read "
                    "index in time): retry"}

    def store() -> KvStore:
        found = store_provider()
        if found is None:
            raise no_kv_store_error()
        return found

    async def read(call: Any) -> KvRead:
        try:
            result: KvRead = await call
        except Exception as exc:
            raise read_error(exc) from None
        return result

    @router.get(
        "/v1/kv/{key:path}",
        response_model=KeyValueOut,
        responses={**answers, 404: {"description": "No such key (the body names the offset the "
                                                   "answer reflects)"}},
        summary="The current value of a key, with its revision",
    )
    async def get_key(
        key: Annotated[str, Path(min_length=1, description="The key; may contain '/'.")],
        consistency: Annotated[Consistency, Query()] = "linearizable",
    ) -> Any:
        body, headers = await key_answer(
            store_provider(), key.encode("utf-8", errors="surrogateescape"),
            linearizable=consistency == "linearizable")
        return Response(body, headers=headers, media_type="application/json")

    @router.get(
        "/v1/kv",
        response_model=RangeOut,
        responses=answers,
        summary="The keys under a prefix, in key order, a page at a time",
    )
    async def get_range(
        response: Response,
        prefix: Annotated[str, Query(description="Key prefix; empty: every key.")] = "",
        limit: Annotated[int, Query(ge=1, le=MAX_RANGE_LIMIT)] = 100,
        page_token: Annotated[str | None, Query(max_length=4096)] = None,
        consistency: Annotated[Consistency, Query()] = "linearizable",
    ) -> RangeOut:
        after = _after_key(page_token) if page_token else None
        result = await read(store().range(
            prefix.encode("utf-8", errors="surrogateescape"), after=after, limit=limit,
            linearizable=consistency == "linearizable", timeout_s=READ_TIMEOUT_S))
        response.headers[OFFSET_HEADER] = str(result.offset)
        response.headers[COMMITTED_HEADER] = str(result.known_committed)
        kvs = [key_value_out(k, e, result.offset) for k, e in result.entries]
        token = _page_token(result.entries[-1][0]) if result.more and result.entries else None
        return RangeOut(kvs=kvs, count=len(kvs), offset=result.offset, next_page_token=token)

    return router
