"""The role as one value (kraft_spark/raft/roles.py): its type is the role, so a role's own
state exists exactly while the node is in that role, and nothing else can set the role."""

from __future__ import annotations

import random

import pytest

from kraft_spark.raft.campaign import Campaign
from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.following import Following
from kraft_spark.raft.leader_state import LeaderState
from kraft_spark.raft.progress import LeaderProgress
from kraft_spark.raft.quorum import VoteTally
from kraft_spark.raft.roles import RESIGNED, UNATTACHED, role_of
from kraft_spark.raft.state import Role
from kraft_spark.sim.memlog import MemoryLog
from tests.core_net import Net

CLUSTER = "roles-cluster"


def test_each_value_stands_for_one_role() -> None:
    tally = VoteTally.opened_by(1)
    leading = LeaderState(LeaderProgress(1, (1, 2, 3)), epoch_start_offset=0, started_ms=0,
                          unendorsed={2, 3})
    assert role_of(UNATTACHED) is Role.UNATTACHED
    assert role_of(RESIGNED) is Role.RESIGNED
    assert role_of(Campaign(tally, pre_vote=True)) is Role.PROSPECTIVE
    assert role_of(Campaign(tally, pre_vote=False)) is Role.CANDIDATE
    assert role_of(Following()) is Role.FOLLOWER
    assert role_of(leading) is Role.LEADER


def role_state_matches(core: RaftCore) -> None:
    """Each role's own state is present in that role and absent in every other."""
    role = core.role
    assert role is role_of(core.role_value)
    assert (core.campaign is not None) == (role in (Role.PROSPECTIVE, Role.CANDIDATE)), role
    assert (core.following is not None) == (role is Role.FOLLOWER), role
    assert (core.leader_state is not None) == (role is Role.LEADER), role


def tick(net: Net, seen: set[Role]) -> None:
    """One tick of the network, then every core checked."""
    net.pump(1)
    for core in net.cores.values():
        role_state_matches(core)
        seen.add(core.role)


def run_until_led(net: Net, seen: set[Role]) -> RaftCore:
    """Let election timers fire and step the network one tick at a time until a core leads,
    checking every core after every tick; the leader."""
    net.now += 5000
    for _ in range(20_000):
        tick(net, seen)
        leaders = [c for c in net.cores.values() if c.role is Role.LEADER]
        if leaders:
            return leaders[0]
    raise AssertionError("no leader elected")


def test_a_role_state_lives_exactly_as_long_as_its_role() -> None:
    """Through an election, the leader lost and another elected, then the cut-off leader
    resigning: after every tick, each core's role value is its role's."""
    net = Net()
    config = QuorumConfig()
    for node in (1, 2, 3):
        net.cores[node] = RaftCore(node_id=node, cluster_id=CLUSTER, voters=(1, 2, 3),
                                   log=MemoryLog(), config=config, rng=random.Random(node),
                                   now_ms=net.now)
    seen: set[Role] = set()
    first = run_until_led(net, seen)
    for _ in range(50):  # its BeginQuorumEpoch makes the others Followers
        tick(net, seen)
    net.cores.pop(first.node_id)  # the leader is cut off: the others elect another
    second = run_until_led(net, seen)
    assert second is not first
    assert {Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE, Role.FOLLOWER,
            Role.LEADER} <= seen, seen
    first.resign(net.now)
    role_state_matches(first)
    assert first.role is Role.RESIGNED and first.leader_state is None


def test_the_role_is_written_only_with_its_value() -> None:
    core = RaftCore(node_id=1, cluster_id=CLUSTER, voters=(1, 2, 3), log=MemoryLog(),
                    config=QuorumConfig(), rng=random.Random(0), now_ms=0)
    for name in ("role", "campaign", "following", "leader_state"):
        with pytest.raises(AttributeError):
            setattr(core, name, None)
