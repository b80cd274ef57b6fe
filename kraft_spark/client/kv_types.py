"""The store client's types (``kraft_spark.client.kv``, ``kraft_spark.client.concurrency``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kraft_spark.client.errors import ConditionFailedError, KvError

__all__ = ["ConditionFailedError", "KeyValue", "KvError", "LeaseInfo", "WatchEvent",
           "WriteResult"]


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: Any
    create_offset: int
    mod_offset: int
    version: int
    offset: int


@dataclass(frozen=True, slots=True)
class WriteResult:
    base_offset: int
    last_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    lease_id: int
    ttl_ms: int
    keys: tuple[str, ...] = ()


def _lease(body: dict[str, Any]) -> LeaseInfo:
    return LeaseInfo(body["lease_id"], body["ttl_ms"], tuple(body.get("keys", ())))


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """``type``: put, delete, progress (``offset``: everything below it was seen) or cancelled
    (the server ended the stream; ``value`` holds its reason). ``id``: where a watch resumes
    right after this event (``watch(after=id)``; for cancelled, the point to resume from);
    precise where ``offset`` is not, since one offset may hold several events (a lease's
    deletes). None for a progress at offset 0."""

    type: str
    offset: int
    key: str | None = None
    value: Any = None
    id: str | None = None
