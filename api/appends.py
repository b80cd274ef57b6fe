"""Appending through the HTTP API: the backend's errors as HTTP answers, and the appender
that runs each append once per Idempotency-Key while the process lives (an LRU of keys)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from api.models import (
    RETRY_AFTER_S,
    ApiError,
    QuorumBackend,
)
from api.values import (
    records_fingerprint,
)
from kraft_spark.client.errors import (
    ClientError,
    ClusterIdMismatchError,
    CommitTimeoutError,
    InvalidRecordError,
    NoLeaderError,
    OffsetBelowLogStartError,
    RecordTooLargeError,
    key_reused,
)
from kraft_spark.client.types import (
    AppendRecord,
    AppendResult,
)


def client_error(exc: ClientError) -> ApiError:
    """Map a backend error (other than a commit timeout) to its HTTP answer."""
    if isinstance(exc, NoLeaderError):
        return ApiError(
            503,
            f"no quorum leader is known right now ({exc}); an election is probably in progress:"
            " retry after the Retry-After delay",
            {"Retry-After": RETRY_AFTER_S},
        )
    if isinstance(exc, RecordTooLargeError):
        return ApiError(413, f"the quorum refused the batch as too large ({exc}): send less data")
    if isinstance(exc, InvalidRecordError):
        return ApiError(422, f"the quorum refused the records as invalid: {exc}")
    if isinstance(exc, OffsetBelowLogStartError):
        return ApiError(410, str(exc))
    if isinstance(exc, ClusterIdMismatchError):
        return ApiError(
            502, f"the sidecar reached a node of another cluster ({exc}): fix its bootstrap list"
        )
    return ApiError(502, f"the quorum failed the request: {type(exc).__name__}: {exc}")


@dataclass(slots=True)
class Entry:
    fingerprint: bytes
    task: asyncio.Future[AppendResult]


class Appender:
    """Runs appends, sharing one append among requests with the same Idempotency-Key."""

    def __init__(self, capacity: int, commit_timeout_s: float, background_commit_s: float) -> None:
        self.capacity = capacity
        self.commit_timeout_s = commit_timeout_s
        self.background_commit_s = max(commit_timeout_s, background_commit_s)
        self.entries: OrderedDict[str, Entry] = OrderedDict()
        # Strong references to appends in flight (the loop keeps only weak ones), including any
        # whose key was evicted; cancelled at shutdown.
        self.in_flight: set[asyncio.Future[AppendResult]] = set()
        self.backend: QuorumBackend | None = None

    def _backend(self) -> QuorumBackend:
        if self.backend is None:
            raise ApiError(503, "the sidecar is still starting", {"Retry-After": RETRY_AFTER_S})
        return self.backend

    async def append(self, records: Sequence[AppendRecord],
                     key: str | None) -> tuple[AppendResult, bool]:
        backend = self._backend()
        if key is None:
            try:
                return await backend.append(records, timeout_s=self.commit_timeout_s), False
            except ClientError as exc:
                raise self.unkeyed_failure(exc) from None
        fingerprint = records_fingerprint(records)
        entry = self.entries.get(key)
        replayed = entry is not None
        if entry is None:
            # The key goes to the quorum too: a retry through another node or process, or
            # after a leader change, is deduplicated there (this LRU only shares in-flight
            # retries and checks the body within this process).
            task = asyncio.ensure_future(backend.append(
                records, timeout_s=self.background_commit_s, idempotency_key=key))
            entry = Entry(fingerprint, task)
            self._remember(key, entry)
            self.in_flight.add(task)
            task.add_done_callback(lambda done: self._settled(key, entry, done))
        elif entry.fingerprint != fingerprint:
            raise ApiError(422, str(key_reused(key)))
        else:
            self.entries.move_to_end(key)
        try:
            result = await asyncio.wait_for(asyncio.shield(entry.task), self.commit_timeout_s)
        except TimeoutError:
            raise ApiError(
                504,
                f"the commit was not confirmed within {self.commit_timeout_s:g} s; the append may "
                f"still commit: retry with the same Idempotency-Key ({key!r}) to get its result "
                "without appending it twice",
            ) from None
        except CommitTimeoutError as exc:
            raise ApiError(
                504,
                f"the append under Idempotency-Key {key!r} was not confirmed committed within "
                f"{self.background_commit_s:g} s ({exc}); it may have committed. Retry with the "
                "same key: the quorum answers the first append's offsets if it holds it, and "
                "appends it once otherwise",
            ) from None
        except ClientError as exc:
            raise client_error(exc) from None
        return result, replayed

    def unkeyed_failure(self, exc: ClientError) -> ApiError:
        """The answer to an append without Idempotency-Key that failed with ``exc``."""
        if isinstance(exc, CommitTimeoutError):
            return ApiError(
                504,
                f"the append was sent but its commit was not confirmed within "
                f"{self.commit_timeout_s:g} s ({exc}); it may still commit. Retrying may "
                "append it twice: send an Idempotency-Key header so a retry is safe",
            )
        return client_error(exc)

    def _remember(self, key: str, entry: Entry) -> None:
        self.entries[key] = entry
        while len(self.entries) > self.capacity:
            # Evict the least recently used settled key; in-flight ones only if all are.
            victim = next((k for k, e in self.entries.items() if e.task.done()), None)
            if victim is None:
                victim = next(iter(self.entries))
            del self.entries[victim]

    def _settled(self, key: str, entry: Entry, task: asyncio.Future[AppendResult]) -> None:
        self.in_flight.discard(task)
        # A failed append's key is forgotten whatever the failure: a retry goes to the quorum
        # again under the same key, and the quorum's producer table (replicated with the log)
        # answers the first append's offsets if any leader appended it, so an unknown outcome
        # (a commit timeout) never makes a second copy.
        failed = task.cancelled() or task.exception() is not None
        if failed and self.entries.get(key) is entry:
            del self.entries[key]

    async def shutdown(self) -> None:
        pending = list(self.in_flight)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


# --------------------------------------------------------------------------- middleware
