"""Client errors. Each message names the cause and, where there is one, the fix."""

from __future__ import annotations


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


class ClusterIdMismatchError(ClientError):
    """The node belongs to another cluster than the one the client was told to expect."""


class NotKafkaEndpointError(ClientError):
    """Every endpoint the client could try answered in HTTP: they are API ports, not Raft
    listeners. Not retriable: the bootstrap list is wrong."""
