"""Vote, BeginQuorumEpoch and EndQuorumEpoch: core messages <-> Kafka wire bodies.

We send KIP-853's versions: each request names the voter it is meant for (its id and directory
id as the sender's voter set lists them), a Vote names the candidate's directory, an
EndQuorumEpoch ranks its successors as (id, directory) pairs, and the responses carry the
endpoint of the leader they name (``NodeEndpoints``, tag 0). Vote goes at v2, whose
``PreVote`` flag is KIP-996's (raft/prevote.py). Version 0 requests (Kafka 3.x peers, older
kraft-spark nodes) are still read: they name no voter key (-1 / NIL), which the core treats as
"any directory".
"""

from __future__ import annotations

from typing import Any

from kraft_spark.protocol import METADATA_TOPIC, ApiKey
from kraft_spark.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    VoteRequest,
    VoteResponse,
)
from kraft_spark.raft.messages import ErrorCode as CoreError
from kraft_spark.raft.voter_set import NIL_DIRECTORY

Body = dict[str, Any]
ElectionRequest = VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest
ElectionResponse = VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse

ELECTION_APIS: dict[int, str] = {  # api key -> the name errors use
    ApiKey.VOTE: "Vote",
    ApiKey.BEGIN_QUORUM_EPOCH: "BeginQuorumEpoch",
    ApiKey.END_QUORUM_EPOCH: "EndQuorumEpoch",
}
# What we send; a response goes back at the version of its request.
VERSIONS: dict[int, int] = {
    ApiKey.VOTE: 2,
    ApiKey.BEGIN_QUORUM_EPOCH: 1,
    ApiKey.END_QUORUM_EPOCH: 1,
}


def _topics(partition: Body) -> list[Body]:
    return [{"topic_name": METADATA_TOPIC, "partitions": [partition]}]


def split_error(error: CoreError) -> tuple[int, int]:
    """(top-level, partition) error codes, as Kafka places them."""
    if error == CoreError.INCONSISTENT_CLUSTER_ID:
        return int(error), 0
    return 0, int(error)


def request_to_wire(msg: ElectionRequest) -> tuple[int, int, Body]:
    """``(api_key, version, body)`` of a core election request."""
    if isinstance(msg, VoteRequest):
        part: Body = {
            "partition_index": 0,
            "candidate_epoch": msg.candidate_epoch,
            "candidate_id": msg.candidate_id,
            "candidate_directory_id": msg.candidate_directory_id,
            "voter_directory_id": msg.voter_directory_id,
            "last_offset_epoch": msg.last_offset_epoch,
            "last_offset": msg.last_offset,
            "pre_vote": msg.pre_vote,
        }
        body = {"cluster_id": msg.cluster_id, "voter_id": msg.voter_id, "topics": _topics(part)}
        return ApiKey.VOTE, VERSIONS[ApiKey.VOTE], body
    if isinstance(msg, BeginQuorumEpochRequest):
        part = {
            "partition_index": 0,
            "voter_directory_id": msg.voter_directory_id,
            "leader_id": msg.leader_id,
            "leader_epoch": msg.leader_epoch,
        }
        body = {"cluster_id": msg.cluster_id, "voter_id": msg.voter_id, "topics": _topics(part),
                "leader_endpoints": []}
        return ApiKey.BEGIN_QUORUM_EPOCH, VERSIONS[ApiKey.BEGIN_QUORUM_EPOCH], body
    directories = msg.successor_directories or (NIL_DIRECTORY,) * len(msg.preferred_successors)
    part = {
        "partition_index": 0,
        "leader_id": msg.leader_id,
        "leader_epoch": msg.leader_epoch,
        "preferred_successors": list(msg.preferred_successors),
        "preferred_candidates": [
            {"candidate_id": node, "candidate_directory_id": directory}
            for node, directory in zip(msg.preferred_successors, directories, strict=True)
        ],
    }
    body = {"cluster_id": msg.cluster_id, "topics": _topics(part), "leader_endpoints": []}
    return ApiKey.END_QUORUM_EPOCH, VERSIONS[ApiKey.END_QUORUM_EPOCH], body


def request_from_wire(
    api_key: int, body: Body, cluster_id: str, part: Body
) -> ElectionRequest:
    """The core request of a decoded body whose single partition (already checked to be
    ``__cluster_metadata-0``) is ``part``; ``cluster_id`` is the request's (or ours if null)."""
    if api_key == ApiKey.VOTE:
        return VoteRequest(
            cluster_id=cluster_id,
            candidate_epoch=part["candidate_epoch"],
            candidate_id=part["candidate_id"],
            last_offset_epoch=part["last_offset_epoch"],
            last_offset=part["last_offset"],
            candidate_directory_id=part.get("candidate_directory_id") or NIL_DIRECTORY,
            voter_id=body.get("voter_id", -1),
            voter_directory_id=part.get("voter_directory_id") or NIL_DIRECTORY,
            pre_vote=bool(part.get("pre_vote", False)),
        )
    if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
        return BeginQuorumEpochRequest(
            cluster_id=cluster_id,
            leader_id=part["leader_id"],
            leader_epoch=part["leader_epoch"],
            voter_id=body.get("voter_id", -1),
            voter_directory_id=part.get("voter_directory_id") or NIL_DIRECTORY,
        )
    candidates = part.get("preferred_candidates")
    if candidates is not None:  # v1
        directories = tuple(c["candidate_directory_id"] or NIL_DIRECTORY for c in candidates)
        return EndQuorumEpochRequest(
            cluster_id=cluster_id,
            leader_id=part["leader_id"],
            leader_epoch=part["leader_epoch"],
            preferred_successors=tuple(c["candidate_id"] for c in candidates),
            # none named is the same as v0's bare ids
            successor_directories=directories if any(
                d != NIL_DIRECTORY for d in directories) else (),
        )
    return EndQuorumEpochRequest(
        cluster_id=cluster_id,
        leader_id=part["leader_id"],
        leader_epoch=part["leader_epoch"],
        preferred_successors=tuple(part.get("preferred_successors") or ()),
    )


def response_to_wire(msg: ElectionResponse, endpoints: list[Body] | None) -> Body:
    """The body of a core election response; ``endpoints`` (``{"node_id", "host", "port"}``
    per voter) give v1's ``NodeEndpoints`` of the leader named (a v0 answer leaves it out)."""
    top, err = split_error(msg.error)
    part: Body = {
        "partition_index": 0,
        "error_code": err,
        "leader_id": msg.leader_id,
        "leader_epoch": msg.leader_epoch,
    }
    if isinstance(msg, VoteResponse):
        part["vote_granted"] = msg.vote_granted
    leader = [e for e in endpoints or () if e["node_id"] == msg.leader_id]
    return {"error_code": top, "topics": _topics(part), "node_endpoints": leader}


def response_from_wire(api_key: int, top: CoreError, part: Body | None) -> ElectionResponse:
    """The core response of a decoded body: ``top`` is its error (the top-level code, else
    the partition's), ``part`` its single partition (None when the answer has none)."""
    if api_key == ApiKey.VOTE:
        if part is None:
            return VoteResponse(top, -1, -1, False)
        return VoteResponse(top, part["leader_id"], part["leader_epoch"], part["vote_granted"])
    cls = BeginQuorumEpochResponse if api_key == ApiKey.BEGIN_QUORUM_EPOCH else (
        EndQuorumEpochResponse)
    if part is None:
        return cls(top, -1, -1)
    return cls(top, part["leader_id"], part["leader_epoch"])
