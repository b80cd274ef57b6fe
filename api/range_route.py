"""``GET /v1/range``: a key, a prefix or every key from a key on, now or at a past revision
(``kraft_spark.store.past_reads``), as etcd's Range reads them: ``kraft-spark kv get --rev N``,
``--from-key``, and a watch's ``--prev-kv``.

``revision`` 0 (the default) reads the current state (linearizable by default, as ``GET
/v1/kv``); a past one reads the node's MVCC history, which keeps the last
``kraft.etcd.history.revisions`` revisions (etcd's API reads the same): one it no longer holds
answers 410 with the oldest it does, one above the current revision 422. Every page of one
revision is the same state, so ``after`` (the last key of the previous page) with the
``revision`` the first page answered continues exactly. ``count`` is how many keys the whole
range holds at that revision, whatever ``limit`` (etcd's ``count``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from api.kv import (
    READ_TIMEOUT_S,
    Consistency,
    KeyValueOut,
    key_value_out,
    no_kv_store_error,
    read_error,
)
from api.models import ApiError
from kraft_spark.store.past_reads import CompactedRevisionError, FutureRevisionError, key_range
from kraft_spark.store.service import MAX_RANGE_LIMIT, KvStore

__all__ = ["range_router"]


class RangeAtOut(BaseModel):
    kvs: list[KeyValueOut]
    count: int = Field(description="How many keys the whole range holds at this revision.")
    more: bool = Field(description="Keys of the range are left after this page: ask again "
                       "with after = the last key and this revision.")
    revision: int = Field(description="The revision read: every committed write at or below "
                          "this offset, none above.")
    offset: int = Field(description="revision + 1: the answer reflects every committed write "
                        "below this (as GET /v1/kv's offset).")


def range_router(store_provider: Callable[[], KvStore | None],
                 errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    router = APIRouter(tags=["kv"])
    answers: dict[int | str, dict[str, Any]] = {
        k: errors[k] for k in (401, 403, 503, 504) if k in errors}
    answers[410] = {"description": "The revision is older than this node's history holds "
                    "(compacted): the body names the oldest it does (``compacted``)"}
    answers[422] = {"description": "A future revision, or a malformed query"}

    @router.get("/v1/range", response_model=RangeAtOut, responses=answers,
                summary="A key, a prefix or the keys from a key on, now or at a past revision")
    async def range_at(
        *,
        key: Annotated[str, Query(description="The key, the prefix, or the first key "
                                  "(empty with prefix or from_key: every key).")],
        prefix: Annotated[bool, Query(description="Every key starting with key.")] = False,
        from_key: Annotated[bool, Query(description="Every key >= key (byte order).")] = False,
        revision: Annotated[int, Query(ge=0, description="The revision to read (0: the "
                                       "current one).")] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_RANGE_LIMIT)] = 1000,
        after: Annotated[str | None, Query(max_length=4096, description="Continue after this "
                                           "key (the last of the previous page).")] = None,
        consistency: Annotated[Consistency, Query()] = "linearizable",
    ) -> RangeAtOut:
        if prefix and from_key:
            raise ApiError(422, "give at most one of prefix and from_key")
        raw = key.encode("utf-8", errors="surrogateescape")
        if not raw and not (prefix or from_key):
            raise ApiError(422, "key must not be empty: for every key give from_key=true")
        store = store_provider()
        if store is None:
            raise no_kv_store_error()
        start, end = key_range(raw, prefix=prefix, from_key=from_key)
        try:
            read = await store.range_at(
                start, end, revision,
                after=None if after is None else after.encode("utf-8", "surrogateescape"),
                limit=limit, linearizable=consistency == "linearizable",
                timeout_s=READ_TIMEOUT_S)
        except CompactedRevisionError as exc:
            raise ApiError(410, str(exc), extra={"compacted": exc.oldest}) from None
        except FutureRevisionError as exc:
            raise ApiError(422, str(exc), extra={"current": exc.current}) from None
        except Exception as exc:
            raise read_error(exc) from None
        offset = read.revision + 1
        return RangeAtOut(kvs=[key_value_out(k, e, offset) for k, e in read.entries],
                          count=read.count, more=read.more, revision=read.revision,
                          offset=offset)

    return router
