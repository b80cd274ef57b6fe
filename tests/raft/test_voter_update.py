"""KIP-853's UpdateRaftVoter in the core (raft/voter_update.py): a voter that listens
somewhere else than its VotersRecord entry says gets the entry corrected through the leader;
misuse gets Kafka's codes. Real cores wired in one process; the wire form round-trips."""

from __future__ import annotations

import uuid

from kraft_spark.protocol import decode_request, decode_response, encode_request, encode_response
from kraft_spark.protocol.wire import (
    request_from_wire,
    request_to_wire,
    response_from_wire,
    response_to_wire,
)
from kraft_spark.raft.messages import ErrorCode, UpdateVoterRequest, VoterChangeResponse
from kraft_spark.raft.voter_records import voters_in
from kraft_spark.raft.voter_set import Endpoint
from tests.core_net import Net
from tests.raft.test_membership import (
    CLUSTER,
    DIRS,
    add,
    ask,
    elect,
    endpoints,
    start,
    three_voters_and_observers,
)

MOVED = (Endpoint("CONTROLLER", "127.0.0.9", 19004),)


def test_a_voter_on_a_new_port_gets_its_entry_corrected_by_the_leader() -> None:
    net, leader = three_voters_and_observers(4)
    assert add(net, leader, 4).error == ErrorCode.NONE  # type: ignore[union-attr]
    net.pump(30)
    moved = net.cores[4]
    assert moved.voter_set.get(4).endpoints == endpoints(4)  # type: ignore[union-attr]
    moved.local_endpoints = MOVED  # as if it restarted listening elsewhere
    for _ in range(5):
        net.now += 100
        net.pump(40)
    for core in net.cores.values():
        assert core.voter_set.get(4).endpoints == MOVED, core.node_id  # type: ignore[union-attr]
    sets = [voters_in(b) for b in leader.log.read(0, 1 << 20)]
    listed = [s.get(4) for s in sets if s is not None]
    assert [v.endpoints for v in listed if v is not None] == [endpoints(4), MOVED]
    # In line now: no further request, no further record.
    end = leader.log.end_offset()
    for _ in range(30):  # well past the retry interval, the leader kept in place
        net.now += 300
        net.pump(20)
    assert leader.log.end_offset() == end


def test_update_misuse_gets_kafkas_codes_and_changes_nothing() -> None:
    net, leader = three_voters_and_observers(4)
    # A static set (kraft.version 0): nothing to update, answered NONE, no record.
    end = leader.log.end_offset()
    static = ask(net, leader, UpdateVoterRequest(CLUSTER, leader.epoch, 2, DIRS[2], MOVED), 5)
    assert isinstance(static, VoterChangeResponse) and static.error == ErrorCode.NONE
    assert leader.log.end_offset() == end
    assert add(net, leader, 4).error == ErrorCode.NONE  # type: ignore[union-attr]
    net.pump(30)
    end = leader.log.end_offset()
    follower = next(c for c in net.cores.values() if c.is_voter and c is not leader)
    cases = [
        (follower, UpdateVoterRequest(CLUSTER, leader.epoch, 4, DIRS[4], MOVED),
         ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (leader, UpdateVoterRequest(CLUSTER, leader.epoch, 4, uuid.UUID(int=5), MOVED),
         ErrorCode.VOTER_NOT_FOUND),
        (leader, UpdateVoterRequest(CLUSTER, leader.epoch, 8, DIRS[8], MOVED),
         ErrorCode.VOTER_NOT_FOUND),
        (leader, UpdateVoterRequest(CLUSTER, leader.epoch, 4, DIRS[4], ()),
         ErrorCode.INVALID_REQUEST),
        (leader, UpdateVoterRequest(CLUSTER, leader.epoch, 4, DIRS[4], MOVED, 0, 0),
         ErrorCode.INVALID_REQUEST),  # cannot run kraft.version 1
        (leader, UpdateVoterRequest("other", leader.epoch, 4, DIRS[4], MOVED),
         ErrorCode.INCONSISTENT_CLUSTER_ID),
    ]
    for node, request, expected in cases:
        reply = ask(net, node, request, 5)
        assert isinstance(reply, VoterChangeResponse)
        assert reply.error == expected, (request, reply)
    assert leader.log.end_offset() == end
    same = ask(net, leader, UpdateVoterRequest(CLUSTER, leader.epoch, 4, DIRS[4], endpoints(4)))
    assert same.error == ErrorCode.NONE and leader.log.end_offset() == end  # type: ignore[union-attr]


def test_a_lone_leader_updates_nothing_of_its_own() -> None:
    net = Net()
    only = start(net, 1, voters=(1,))
    only.local_endpoints = MOVED
    elect(net)
    for _ in range(30):
        net.now += 300
        net.pump(20)
    assert only.voter_set.get(1).endpoints != MOVED  # type: ignore[union-attr]


def test_update_raft_voter_round_trips_on_the_wire() -> None:
    request = UpdateVoterRequest(CLUSTER, 7, 4, DIRS[4], MOVED, 0, 1)
    api_key, version, body = request_to_wire(request)
    assert (api_key, version) == (82, 0)
    header, decoded = decode_request(encode_request(api_key, version, 5, "t", body)[4:])
    assert request_from_wire(header.api_key, decoded, CLUSTER) == request
    answer = VoterChangeResponse(ErrorCode.VOTER_NOT_FOUND, "gone", 2, 7)
    wire = response_to_wire(answer, CLUSTER, [{"node_id": 2, "host": "10.0.0.2", "port": 9093}])
    assert wire["current_leader"] == {"leader_id": 2, "leader_epoch": 7, "host": "10.0.0.2",
                                      "port": 9093}
    frame = encode_response(api_key, version, 5, wire)
    back = response_from_wire(api_key, decode_response(api_key, version, frame[4:])[1])
    assert (back.error, back.leader_id, back.leader_epoch) == (  # type: ignore[union-attr]
        ErrorCode.VOTER_NOT_FOUND, 2, 7)
