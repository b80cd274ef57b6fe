"""Writes attached to a lease: ``"lease_id"`` beside ``"records"`` in ``POST /v1/records``
puts the ``kraft.lease`` header on every record (``kraft_spark.store.leases``); the state
machine attaches the keys, or fails the write when the lease does not exist (404)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from api.models import ApiError
from kraft_spark.client.types import AppendRecord
from kraft_spark.store.leases import LEASE_HEADER

MAX_LEASE_ID = (1 << 63) - 1


def lease_field(parsed: dict[str, Any]) -> int | None:
    """Remove and return the body's ``lease_id`` (None when absent); ApiError 422 if bad."""
    if "lease_id" not in parsed:
        return None
    lease = parsed.pop("lease_id")
    if not isinstance(lease, int) or isinstance(lease, bool) or not 1 <= lease <= MAX_LEASE_ID:
        raise ApiError(422, f"lease_id must be a lease id (1 to {MAX_LEASE_ID}) from POST "
                            f"/v1/leases, got {lease!r}")
    return lease


def with_lease(records: Sequence[AppendRecord], lease_id: int) -> list[AppendRecord]:
    """``records`` (whose own headers hold no reserved one: api.values.to_records refused
    them) with the ``kraft.lease`` header added."""
    header = (LEASE_HEADER, str(lease_id).encode())
    for index, record in enumerate(records):
        if record.key is None or record.value is None:
            raise ApiError(422, f"records[{index}]: a deletion cannot be attached to a lease")
    return [replace(r, headers=(*r.headers, header)) for r in records]
