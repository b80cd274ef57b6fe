"""Conditional writes over HTTP: ``POST /v1/records`` with ``"conditions"`` beside ``"records"``.

The conditions travel in the log with the records (``kraft_spark.store.txn``: the ``kraft.txn``
header on the first record) and are judged by every replica's state machine where the records
land; after the commit, the node that took the request waits until its own state has applied
them and answers 200, or 409 naming the keys whose condition failed with their revision when
judged. An Idempotency-Key retry returns the first append's offsets and so the first outcome,
while that is within the outcome window (``kraft_spark.state.outcomes``); past it the answer is
410 "outcome unknown", the same on every node, never a 200 for a write that failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from api.models import MAX_RECORDS_PER_REQUEST, RECORD_SHAPE, RETRY_AFTER_S, ApiError, RecordIn
from api.values import RecordFields, describe_errors
from kraft_spark.client.errors import ClientError
from kraft_spark.client.types import AppendRecord, AppendResult
from kraft_spark.state.outcomes import OutcomeUnknown
from kraft_spark.store.service import KvStore, ReadTimeoutError
from kraft_spark.store.txn import MAX_CONDITIONS, TXN_HEADER, Condition, encode_header

CONDITION_SHAPE: Final = (
    'Conditions look like {"key": "k", "mod_offset": 12}, {"key": "k", "version": 3} or '
    '{"key": "k", "exists": false}.')


class ConditionIn(BaseModel):
    """One condition: exactly one of mod_offset, version, exists."""

    model_config = ConfigDict(extra="forbid", strict=True)

    key: str = Field(min_length=1)
    mod_offset: int | None = Field(default=None, ge=0,
                                   description="The key's last write is at this offset.")
    version: int | None = Field(default=None, ge=0,
                                description="The key's version is this (0: the key is absent).")
    exists: bool | None = Field(default=None, description="The key is present (or absent).")

    @model_validator(mode="after")
    def _exactly_one(self) -> ConditionIn:
        if sum(x is not None for x in (self.mod_offset, self.version, self.exists)) != 1:
            raise ValueError("give exactly one of mod_offset, version, exists")
        return self


class ConditionalBatchIn(BaseModel):
    """Records written only if every condition holds when they land in the log, all or none."""

    model_config = ConfigDict(extra="forbid", strict=True)

    records: list[RecordIn] = Field(min_length=1, max_length=MAX_RECORDS_PER_REQUEST)
    conditions: list[ConditionIn] = Field(max_length=MAX_CONDITIONS)


class FailedCondition(BaseModel):
    key: str
    mod_offset: int = Field(description="The key's last write when judged (0: absent).")
    version: int = Field(description="The key's version when judged (0: absent).")


class ConflictOut(BaseModel):
    """409: a condition failed; nothing was written (the request is in the log, marked)."""

    error: str
    failed: list[FailedCondition]
    base_offset: int
    last_offset: int
    epoch: int


def parse_conditional(parsed: dict[str, Any]) -> tuple[list[RecordFields], list[Condition]]:
    """The records and conditions of a body holding ``"conditions"``; ApiError 422 if wrong."""
    try:
        batch = ConditionalBatchIn.model_validate(parsed)
    except ValidationError as exc:
        raise ApiError(422, f"invalid request body: {describe_errors(exc.errors())}. "
                            f"{RECORD_SHAPE} {CONDITION_SHAPE}") from None
    # A kraft.txn header among the records' own is refused with the others the API reserves
    # (api.values.to_records, kraft_spark.store.reserved_headers).
    records = [(r.key, r.value, r.headers) for r in batch.records]
    conditions = [Condition(c.key.encode("utf-8"), c.mod_offset, c.version, c.exists)
                  for c in batch.conditions]
    return records, conditions


def with_conditions(records: Sequence[AppendRecord],
                    conditions: Sequence[Condition]) -> list[AppendRecord]:
    """The records as one conditional group: the header goes on the first."""
    first = records[0]
    header = (TXN_HEADER, encode_header(len(records), conditions))
    return [replace(first, headers=(*first.headers, header)), *records[1:]]


def no_store_error() -> ApiError:
    return ApiError(503, "this endpoint holds no copy of the store's state, so it cannot tell "
                         "whether conditions held: send conditional writes to a node's HTTP API "
                         "or the Spark application's", {"Retry-After": RETRY_AFTER_S})


def outcome_unknown(exc: OutcomeUnknown, result: AppendResult) -> ApiError:
    """410: the write committed (an Idempotency-Key retry of an old one, typically) but
    whether it applied is older than what every node remembers."""
    return ApiError(410, f"{exc}: the write committed at offsets {result.base_offset}.."
                         f"{result.last_offset}, but whether its conditions held is no longer "
                         "known", extra={"base_offset": result.base_offset,
                                         "last_offset": result.last_offset,
                                         "epoch": result.epoch})


async def judge(store: KvStore, result: AppendResult, timeout_s: float) -> None:
    """Wait for the local state to apply the append; ApiError 409 if a condition failed."""
    try:
        failure = await store.outcome(result.base_offset, result.last_offset + 1, timeout_s)
    except ReadTimeoutError as exc:
        raise ApiError(504, f"the write committed at offset {result.base_offset} but its "
                            f"outcome is not known here yet ({exc}); read the keys to see "
                            "whether it applied") from None
    except ClientError as exc:
        raise ApiError(502, f"the outcome of the write is unknown: {exc}") from None
    except OutcomeUnknown as exc:
        raise outcome_unknown(exc, result) from None
    if failure is None:
        return
    if failure.reason and not failure.failures:  # a lease that does not exist, say
        status = 404 if "not found" in failure.reason else 409
        raise ApiError(status, f"nothing was written: {failure.reason}",
                       extra={"base_offset": result.base_offset,
                              "last_offset": result.last_offset, "epoch": result.epoch})
    failed = [FailedCondition(key=f.key.decode("utf-8", errors="replace"),
                              mod_offset=f.mod_offset, version=f.version).model_dump()
              for f in failure.failures]
    names = ", ".join(repr(f["key"]) for f in failed) or "(malformed conditions)"
    raise ApiError(409, f"conditions failed on {names}: nothing was written; read the keys "
                        "again and retry with their current revisions",
                   extra={"failed": failed, "base_offset": result.base_offset,
                          "last_offset": result.last_offset, "epoch": result.epoch})
