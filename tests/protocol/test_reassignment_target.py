"""Quorum reassignment (docs/operations/voters.md): each step of ``metadata-quorum reassign``
names the
voter set it moves to, and the leader's DescribeQuorum shows that target until the set in
force is it (real cores; the CLI drives the steps in tests/integration/test_dynamic_quorum.py)."""

from __future__ import annotations

from kraft_spark.protocol import ApiKey, decode_response, encode_response
from kraft_spark.protocol.wire import response_from_wire, response_to_wire
from kraft_spark.raft.messages import (
    AddVoterRequest,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ErrorCode,
    RemoveVoterRequest,
)
from tests.raft.test_membership import CLUSTER, DIRS, ask, endpoints, three_voters_and_observers


def target_of(net: object, leader: object) -> tuple[int, ...]:
    reply = ask(net, leader, DescribeQuorumRequest(), 2)  # type: ignore[arg-type]
    assert isinstance(reply, DescribeQuorumResponse) and reply.error == ErrorCode.NONE
    return reply.target_voters


def test_the_target_shows_while_the_steps_run_and_goes_when_reached() -> None:
    net, leader = three_voters_and_observers(4, 5)
    assert target_of(net, leader) == ()
    goal = (1, 2, 4, 5)  # grow by 4 and 5, then drop 3
    step = AddVoterRequest(CLUSTER, 5000, 4, DIRS[4], endpoints(4), goal)
    assert ask(net, leader, step).error == ErrorCode.NONE  # type: ignore[union-attr]
    assert target_of(net, leader) == goal
    step = AddVoterRequest(CLUSTER, 5000, 5, DIRS[5], endpoints(5), goal)
    assert ask(net, leader, step).error == ErrorCode.NONE  # type: ignore[union-attr]
    assert target_of(net, leader) == goal  # (1, 2, 3, 4, 5): not there yet
    assert leader.node_id != 3  # type: ignore[attr-defined]  # (seeded: 2 leads)
    last = RemoveVoterRequest(CLUSTER, 3, DIRS[3], goal)
    assert ask(net, leader, last).error == ErrorCode.NONE  # type: ignore[union-attr]
    assert target_of(net, leader) == ()
    # A lone change (no target) shows none.
    lone = RemoveVoterRequest(CLUSTER, 5, DIRS[5])
    assert ask(net, leader, lone).error == ErrorCode.NONE  # type: ignore[union-attr]
    assert target_of(net, leader) == ()


def test_the_target_travels_in_describe_quorum() -> None:
    answer = DescribeQuorumResponse(ErrorCode.NONE, 1, 3, 10, target_voters=(1, 2, 4))
    body = response_to_wire(answer, CLUSTER)
    frame = encode_response(ApiKey.DESCRIBE_QUORUM, 2, 7, body)
    back = response_from_wire(ApiKey.DESCRIBE_QUORUM,
                              decode_response(ApiKey.DESCRIBE_QUORUM, 2, frame[4:])[1])
    assert isinstance(back, DescribeQuorumResponse) and back.target_voters == (1, 2, 4)
