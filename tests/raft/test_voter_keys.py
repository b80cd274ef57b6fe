"""KIP-853's voter keys in Vote, BeginQuorumEpoch and EndQuorumEpoch: a request names the voter
(id, directory id) it is meant for, and a node on another disk of that id does not answer as
that voter. Real cores, driven directly and through ``tests.core_net.Net``; the wire forms in
``protocol/wire_elections``."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable

from kraft_spark.protocol import ApiKey, decode_request, encode_request
from kraft_spark.protocol.wire import request_from_wire, request_to_wire
from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    ErrorCode,
    Response,
    VoteRequest,
    VoteResponse,
)
from kraft_spark.raft.ready import Ready
from kraft_spark.raft.state import PersistedState, Role
from kraft_spark.raft.voter_set import NIL_DIRECTORY, Voter, VoterSet
from kraft_spark.sim.memlog import MemoryLog
from tests.core_net import Net

CLUSTER = "keys"
CONFIG = QuorumConfig(fetch_timeout_jitter_ms=0)
DIRS = {i: uuid.UUID(int=0x2000 + i) for i in range(1, 6)}
NEW_DISK = uuid.UUID(int=0x9999)
VOTERS = VoterSet(tuple(Voter(i, DIRS[i]) for i in (1, 2, 3)))


def core(node_id: int, directory: uuid.UUID | None = None, net: Net | None = None,
         persisted: PersistedState | None = None) -> RaftCore:
    made = RaftCore(node_id=node_id, cluster_id=CLUSTER, voters=(1, 2, 3), log=MemoryLog(),
                    config=CONFIG, rng=random.Random(node_id), now_ms=1000, voter_set=VOTERS,
                    directory_id=directory or DIRS[node_id], persisted=persisted)
    if net is not None:
        net.cores[node_id] = made
    return made


def answer(node: RaftCore, request: object, src: int = 1) -> Response:
    node.handle_request(1000, src, ("peer", src), request)  # type: ignore[arg-type]
    replies = node.take_ready().replies
    assert len(replies) == 1
    return replies[0].message


def vote(epoch: int, *, voter_id: int = 2, voter_dir: uuid.UUID = NIL_DIRECTORY,
         candidate: int = 1, candidate_dir: uuid.UUID = NIL_DIRECTORY) -> VoteRequest:
    return VoteRequest(CLUSTER, epoch, candidate, 0, 0, candidate_dir, voter_id, voter_dir)


def test_a_vote_meant_for_another_disk_of_ours_is_refused_without_adopting_its_epoch() -> None:
    node = core(2)
    reply = answer(node, vote(5, voter_dir=NEW_DISK))
    assert isinstance(reply, VoteResponse)
    assert (reply.error, reply.vote_granted) == (ErrorCode.INVALID_VOTER_KEY, False)
    # Unlike Kafka, the epoch is not adopted either (see handle_vote_request).
    assert node.epoch == 0 and node.voted_id == -1
    other = answer(node, vote(6, voter_id=3))  # meant for another node altogether
    assert isinstance(other, VoteResponse) and other.error == ErrorCode.INVALID_VOTER_KEY


def test_a_vote_with_our_key_or_none_is_decided_by_the_usual_rules() -> None:
    named = answer(core(2), vote(5, voter_dir=DIRS[2], candidate_dir=DIRS[1]))
    assert isinstance(named, VoteResponse) and named.vote_granted
    unnamed = answer(core(2), VoteRequest(CLUSTER, 5, 1, 0, 0))  # a v0 request
    assert isinstance(unnamed, VoteResponse) and unnamed.vote_granted


def test_one_vote_per_epoch_counts_the_candidates_directory() -> None:
    node = core(2)
    first = answer(node, vote(5, voter_dir=DIRS[2], candidate_dir=DIRS[1]))
    assert isinstance(first, VoteResponse) and first.vote_granted
    state = node.persisted_state()
    assert (state.voted_id, state.voted_directory_id) == (1, DIRS[1])
    # The same id on another disk is another candidate: refused in this epoch.
    again = answer(node, vote(5, voter_dir=DIRS[2], candidate_dir=NEW_DISK))
    assert isinstance(again, VoteResponse) and not again.vote_granted
    # The same candidate again is granted again (a retry), and the vote survives a restart
    # through quorum-state's votedDirectoryId.
    retry = answer(node, vote(5, voter_dir=DIRS[2], candidate_dir=DIRS[1]))
    assert isinstance(retry, VoteResponse) and retry.vote_granted
    saved = PersistedState.from_json_dict(state.to_json_dict(CLUSTER, (1, 2, 3)))
    assert saved.voted_directory_id == DIRS[1]
    restarted = core(2, persisted=saved)
    refused = answer(restarted, vote(5, voter_dir=DIRS[2], candidate_dir=NEW_DISK))
    assert isinstance(refused, VoteResponse) and not refused.vote_granted


def test_begin_quorum_epoch_for_another_disk_is_followed_but_not_endorsed() -> None:
    node = core(2, directory=NEW_DISK)
    reply = answer(node, BeginQuorumEpochRequest(CLUSTER, 1, 4, 2, DIRS[2]))
    assert isinstance(reply, BeginQuorumEpochResponse)
    assert reply.error == ErrorCode.INVALID_VOTER_KEY
    assert (node.role, node.epoch, node.leader_id) == (Role.FOLLOWER, 4, 1)
    ours = answer(core(2), BeginQuorumEpochRequest(CLUSTER, 1, 4, 2, DIRS[2]))
    assert isinstance(ours, BeginQuorumEpochResponse) and ours.error == ErrorCode.NONE


def test_a_successor_named_with_another_directory_does_not_campaign_at_once() -> None:
    mine = core(2)
    answer(mine, BeginQuorumEpochRequest(CLUSTER, 1, 4, 2, DIRS[2]))
    answer(mine, EndQuorumEpochRequest(CLUSTER, 1, 4, (2, 3), (DIRS[2], DIRS[3])))
    assert mine.role is Role.CANDIDATE  # successor 0 with our key: at once
    other = core(2, directory=NEW_DISK)
    answer(other, BeginQuorumEpochRequest(CLUSTER, 1, 4, -1, NIL_DIRECTORY))
    answer(other, EndQuorumEpochRequest(CLUSTER, 1, 4, (2, 3), (DIRS[2], DIRS[3])))
    assert other.role is not Role.CANDIDATE


def test_candidates_and_leaders_name_each_voter_by_its_key() -> None:
    net = Net()
    seen: list[object] = []
    for i in (1, 2, 3):
        node = core(i, net=net)
        take = node.take_ready

        def recording(take: Callable[[], Ready] = take) -> Ready:
            ready = take()
            seen.extend(out.message for out in ready.sends)
            return ready

        node.take_ready = recording  # type: ignore[method-assign]
    for _ in range(40):
        net.now += 500
        net.pump(20)
        if any(isinstance(m, BeginQuorumEpochRequest) for m in seen):
            break
    votes = [m for m in seen if isinstance(m, VoteRequest)]
    begins = [m for m in seen if isinstance(m, BeginQuorumEpochRequest)]
    assert votes and begins
    for m in votes:
        assert m.voter_directory_id == DIRS[m.voter_id]
        assert m.candidate_directory_id == DIRS[m.candidate_id]
    for b in begins:
        assert b.voter_directory_id == DIRS[b.voter_id] and b.voter_id != b.leader_id


def test_election_requests_travel_at_version_1_and_version_0_is_still_read() -> None:
    requests: list[VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest] = [
        vote(7, voter_dir=DIRS[2], candidate_dir=DIRS[1]),
        BeginQuorumEpochRequest(CLUSTER, 1, 7, 3, DIRS[3]),
        EndQuorumEpochRequest(CLUSTER, 1, 7, (3, 2), (DIRS[3], DIRS[2])),
    ]
    for request in requests:
        api_key, version, body = request_to_wire(request)
        assert version == (2 if isinstance(request, VoteRequest) else 1)
        header, decoded = decode_request(encode_request(api_key, version, 9, "t", body)[4:])
        assert request_from_wire(header.api_key, decoded, CLUSTER) == request
    # A v0 EndQuorumEpoch (bare successor ids) and Vote (no keys) decode without keys.
    _, _, body = request_to_wire(requests[2])
    header, decoded = decode_request(encode_request(ApiKey.END_QUORUM_EPOCH, 0, 9, "t", body)[4:])
    old = request_from_wire(header.api_key, decoded, CLUSTER)
    assert isinstance(old, EndQuorumEpochRequest)
    assert (old.preferred_successors, old.successor_directories) == ((3, 2), ())
    _, _, body = request_to_wire(requests[0])
    header, decoded = decode_request(encode_request(ApiKey.VOTE, 0, 9, "t", body)[4:])
    assert request_from_wire(header.api_key, decoded, CLUSTER) == VoteRequest(CLUSTER, 7, 1, 0, 0)
