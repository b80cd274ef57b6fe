"""Client errors. Each message names the cause and, where there is one, the fix."""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Base of every error the client raises."""


class NoLeaderError(ClientError):
    """No node named a leader within the retry budget (an election is in progress, or the
    quorum is unreachable). Retriable later: HTTP maps it to 503 with Retry-After."""


class CommitTimeoutError(ClientError):
    """The append was sent but its commit was not confirmed in time. It may still commit; a
    retry with the same producer id and sequence will not append it twice."""


class RecordTooLargeError(ClientError):
    """A record or batch exceeds the size the quorum accepts (MESSAGE_TOO_LARGE)."""


class InvalidRecordError(ClientError):
    """The quorum refused the records as invalid (INVALID_RECORD, CORRUPT_MESSAGE)."""


class IdempotencyKeyReusedError(InvalidRecordError):
    """An Idempotency-Key's retry carried another number of records than its first append."""


def key_reused(key: str) -> IdempotencyKeyReusedError:
    return IdempotencyKeyReusedError(
        f"Idempotency-Key {key!r} was already used for a different request body: use a new "
        "key for a new request (a retry must repeat the same body)")


class ClusterIdMismatchError(ClientError):
    """The node belongs to another cluster than the one the client was told to expect."""


class NotKafkaEndpointError(ClientError):
    """Every endpoint the client could try answered in HTTP: they are API ports, not Raft
    listeners. Not retriable: the bootstrap list is wrong."""


class AuthenticationError(ClientError):
    """The quorum's listeners require credentials this client was not given, or refused the
    ones it gave (SASL/PLAIN). Not retriable: fix the client's configuration (``sasl=``, or the
    commands' ``--command-config``)."""


class OffsetBelowLogStartError(ClientError):
    """The offset asked for is below the log start offset (KIP-630): retention deleted those
    records after a snapshot captured their effect. Kafka's OFFSET_OUT_OF_RANGE on the wire.
    Not retriable at that offset: read from ``log_start_offset``, or query the history in the
    Delta ``records`` table."""

    def __init__(self, from_offset: int, log_start_offset: int, snapshot: str | None) -> None:
        self.from_offset = from_offset
        self.log_start_offset = log_start_offset
        self.snapshot = snapshot
        where = f" (snapshot {snapshot} holds the state up to there)" if snapshot else ""
        super().__init__(
            f"offset {from_offset} is below the log start offset {log_start_offset}{where}: "
            f"retention deleted those records; read from offset {log_start_offset}, or query "
            "their history in the Delta records table"
        )


def snapshot_label(snapshot: object) -> str | None:
    """``<end offset>-<epoch>`` of a wire or core snapshot id (None when absent)."""
    if snapshot is None:
        return None
    if isinstance(snapshot, dict):
        offset, epoch = snapshot.get("end_offset", -1), snapshot.get("epoch", -1)
    else:
        offset, epoch = getattr(snapshot, "offset", -1), getattr(snapshot, "epoch", -1)
    return f"{offset}-{epoch}" if offset >= 0 else None


class KvError(ClientError):
    """An error answer: ``status`` and the server's message."""

    def __init__(self, status: int, message: str, body: dict[str, Any]) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.body = body


class ConditionFailedError(KvError):
    """409: a condition did not hold; nothing was written. ``failed``: the keys with their
    revision when judged (``{"key", "mod_offset", "version"}``)."""

    @property
    def failed(self) -> list[dict[str, Any]]:
        return list(self.body.get("failed", []))
