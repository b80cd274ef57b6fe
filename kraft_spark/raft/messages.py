"""The messages the core consumes and produces, as plain values.

They mirror Kafka's RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, Produce, DescribeQuorum)
field for field where the core needs a field; the wire codec in ``kraft_spark.protocol`` maps
them to bytes. A leader id of -1 means "unknown". Every response carries the sender's view of
the current leader and epoch so the receiver can catch up.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum

from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch, Record
from kraft_spark.raft.voter_set import NIL_DIRECTORY, Endpoint

NO_LEADER = -1
# ReplicaId of a plain client read (sees committed records only).
CLIENT_REPLICA_ID = -1


class ErrorCode(IntEnum):
    """Kafka's error codes (Errors.java numbers) used by the quorum."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    INVALID_RECORD = 87
    INCONSISTENT_VOTER_SET = 94
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    INCONSISTENT_CLUSTER_ID = 104
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127


@dataclass(frozen=True, slots=True)
class VoteRequest:
    cluster_id: str
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int
    # KIP-853 (Vote v1): the candidate's directory, and the voter key the request is meant for
    # (its id and directory as the candidate's voter set lists them; -1 / NIL: not said).
    candidate_directory_id: uuid.UUID = NIL_DIRECTORY
    voter_id: int = -1
    voter_directory_id: uuid.UUID = NIL_DIRECTORY
    # KIP-996 (Vote v2): only asking whether the vote would be granted (see raft/prevote.py).
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    cluster_id: str
    leader_id: int
    leader_epoch: int
    # KIP-853 (BeginQuorumEpoch v1): the voter key the request is meant for.
    voter_id: int = -1
    voter_directory_id: uuid.UUID = NIL_DIRECTORY


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    cluster_id: str
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]
    # KIP-853 (EndQuorumEpoch v1's PreferredCandidates): the directory of each successor, in
    # the same order (empty: not known, as in v0).
    successor_directories: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    cluster_id: str
    replica_id: int
    current_leader_epoch: int  # -1: a client that does not know (skip the epoch check)
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int
    max_bytes: int
    # A voter that lost its disk and is catching up (docs/concepts/protocol.md): the leader
    # serves it like an observer, so its offsets never count toward the high watermark or
    # check-quorum. On the wire this rides as a tagged field, like KIP-853's ReplicaDirectoryId.
    catching_up: bool = False
    # KIP-853: the directory.id of the fetching replica's meta.properties (NIL: unknown).
    directory_id: uuid.UUID = NIL_DIRECTORY


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int
    diverging_epoch: OffsetAndEpoch | None = None
    batches: tuple[Batch, ...] = ()
    # KIP-630: set when the fetch offset is below the leader's log start: fetch this snapshot
    # (FetchSnapshot), then fetch the log from its end offset.
    snapshot_id: OffsetAndEpoch | None = None
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """KIP-630 FetchSnapshot (api key 59): ``max_bytes`` of snapshot ``snapshot_id`` from
    ``position``."""

    cluster_id: str
    replica_id: int
    current_leader_epoch: int
    snapshot_id: OffsetAndEpoch
    position: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int
    snapshot_id: OffsetAndEpoch | None = None
    size: int = -1
    position: int = -1
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """A client append; acks = -1 semantics (answered once committed)."""

    records: tuple[Record, ...]
    timeout_ms: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int
    base_offset: int = -1
    last_offset: int = -1
    # Epoch of the batch that holds the records (the leader epoch that appended them).
    epoch: int = -1
    message: str = ""


@dataclass(frozen=True, slots=True)
class DescribeQuorumRequest:
    pass


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """KIP-836 ReplicaState; timestamps are wall-clock ms, -1 when unknown."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int
    directory_id: uuid.UUID = NIL_DIRECTORY


@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int = -1
    voters: tuple[ReplicaState, ...] = ()
    observers: tuple[ReplicaState, ...] = ()
    # KIP-630, the leader's: its log start offset and newest snapshot (None: none).
    log_start_offset: int = -1
    latest_snapshot: OffsetAndEpoch | None = None
    # KIP-853 (DescribeQuorum v2's Nodes): the endpoints of the voters in force.
    endpoints: tuple[tuple[int, tuple[Endpoint, ...]], ...] = ()
    # The voter set a reassignment in progress moves to (TargetVoters, docs/operations/voters.md;
    # a kraft-spark tagged field): empty when none is.
    target_voters: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class AddVoterRequest:
    """KIP-853 AddRaftVoter (api key 80): make the observer (voter_id, directory_id) a voter."""

    cluster_id: str | None
    timeout_ms: int
    voter_id: int
    directory_id: uuid.UUID
    endpoints: tuple[Endpoint, ...]
    # A step of ``metadata-quorum reassign``: the voter set it moves to (empty: a lone change).
    target_voters: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RemoveVoterRequest:
    """KIP-853 RemoveRaftVoter (api key 81)."""

    cluster_id: str | None
    voter_id: int
    directory_id: uuid.UUID
    target_voters: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class UpdateVoterRequest:
    """KIP-853 UpdateRaftVoter (api key 82): voter (voter_id, directory_id) now listens at
    ``endpoints`` (raft/voter_update.py)."""

    cluster_id: str | None
    current_leader_epoch: int
    voter_id: int
    directory_id: uuid.UUID
    endpoints: tuple[Endpoint, ...]
    # The kraft.version range the voter supports (KRaftVersionFeature).
    min_kraft_version: int = 0
    max_kraft_version: int = 1


@dataclass(frozen=True, slots=True)
class VoterChangeResponse:
    """The answer to AddRaftVoter and RemoveRaftVoter: sent once the change commits, or at
    once with an error (the leader's view of leader and epoch, for clients to follow)."""

    error: ErrorCode
    message: str | None
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class ReadIndexRequest:
    """Ask the leader for a read index (``kraft_spark.raft.read_index``); a kraft-spark API."""

    timeout_ms: int = 5000


@dataclass(frozen=True, slots=True)
class ReadIndexResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int
    # Every write acknowledged before the request arrived lies below this offset (-1: error).
    read_offset: int = -1


Request = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
    | ProduceRequest
    | DescribeQuorumRequest
    | AddVoterRequest
    | RemoveVoterRequest
    | UpdateVoterRequest
    | ReadIndexRequest
)
Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
    | ProduceResponse
    | DescribeQuorumResponse
    | VoterChangeResponse
    | ReadIndexResponse
)


def request_source(message: Request) -> int:
    """The node a request comes from, as its fields name it (-1: a request that names none)."""
    if isinstance(message, FetchRequest):
        return message.replica_id
    if isinstance(message, VoteRequest):
        return message.candidate_id
    if isinstance(message, BeginQuorumEpochRequest | EndQuorumEpochRequest):
        return message.leader_id
    return -1
