"""KIP-853 in the core: AddRaftVoter / RemoveRaftVoter on real cores wired in one process."""

from __future__ import annotations

import random
import uuid

from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.messages import (
    AddVoterRequest,
    ErrorCode,
    ProduceRequest,
    RemoveVoterRequest,
    Response,
    VoterChangeResponse,
)
from kraft_spark.raft.records import Record
from kraft_spark.raft.state import Role
from kraft_spark.raft.voter_records import voters_in
from kraft_spark.raft.voter_set import Endpoint, VoterSet
from kraft_spark.sim.memlog import MemoryLog
from tests.core_net import Net

CLUSTER = "members"
CONFIG = QuorumConfig(fetch_timeout_jitter_ms=0)
DIRS = {i: uuid.UUID(int=0x1000 + i) for i in range(1, 10)}


def endpoints(node_id: int) -> tuple[Endpoint, ...]:
    return (Endpoint("CONTROLLER", "127.0.0.1", 9000 + node_id),)


def start(net: Net, node_id: int, voters: tuple[int, ...] = (1, 2, 3),
          *, log: MemoryLog | None = None, directory: uuid.UUID | None = None,
          disk_lost: bool = False) -> RaftCore:
    static = VoterSet.of_ids(voters).with_endpoints({v: ("127.0.0.1", 9000 + v) for v in voters})
    core = RaftCore(
        node_id=node_id, cluster_id=CLUSTER, voters=voters, log=log or MemoryLog(),
        config=CONFIG, rng=random.Random(node_id), now_ms=net.now, voter_set=static,
        directory_id=directory or DIRS[node_id], disk_lost=disk_lost)
    net.cores[node_id] = core
    return core


def leader_of(net: Net) -> RaftCore:
    leaders = [c for c in net.cores.values() if c.role is Role.LEADER]
    assert len(leaders) == 1, [c.describe_role() for c in net.cores.values()]
    return leaders[0]


def elect(net: Net) -> RaftCore:
    for _ in range(40):
        net.now += 500
        net.pump(20)
        leaders = [c for c in net.cores.values() if c.role is Role.LEADER]
        if leaders and leaders[0].high_watermark > 0:
            return leaders[0]
    raise AssertionError("no leader committed anything")


counter = iter(range(1_000_000))


def ask(net: Net, node: RaftCore, request: object, rounds: int = 60) -> Response:
    token = ("client", next(counter))
    node.handle_request(net.now, 0, token, request)  # type: ignore[arg-type]
    net.pump(rounds)
    return net.client_replies[token]


def append(net: Net, leader: RaftCore, n: int = 3) -> None:
    for i in range(n):
        reply = ask(net, leader, ProduceRequest((Record(b"k", b"v%d" % i),), 2000), 10)
        assert reply.error == ErrorCode.NONE, reply


def add(net: Net, leader: RaftCore, node_id: int, directory: uuid.UUID | None = None) -> Response:
    return ask(net, leader, AddVoterRequest(
        CLUSTER, 5000, node_id, directory or DIRS[node_id], endpoints(node_id)))


def three_voters_and_observers(*observers: int) -> tuple[Net, RaftCore]:
    net = Net()
    for i in (1, 2, 3, *observers):
        start(net, i)
    leader = elect(net)
    append(net, leader)
    net.pump(50)
    return net, leader


def test_an_observer_that_caught_up_is_added_and_every_node_adopts_the_new_set() -> None:
    net, leader = three_voters_and_observers(4)
    assert not net.cores[4].is_voter
    reply = add(net, leader, 4)
    assert isinstance(reply, VoterChangeResponse) and reply.error == ErrorCode.NONE, reply
    net.pump(30)
    for core in net.cores.values():
        assert core.voters == (1, 2, 3, 4)
        assert core.voter_set.get(4) is not None
        assert core.voter_set.get(4).directory_id == DIRS[4]  # type: ignore[union-attr]
    assert net.cores[4].is_voter
    # The first change upgrades: the static voters get the directories they fetched with.
    assert leader.voter_set.get(2).directory_id == DIRS[2]  # type: ignore[union-attr]
    sets = [voters_in(b) for b in leader.log.read(0, 1 << 20)]
    assert [s.ids() for s in sets if s is not None] == [(1, 2, 3, 4)]
    # Four voters: commits need three of them.
    assert leader.leader_state is not None and leader.leader_state.progress.n_voters == 4
    append(net, leader)


def test_misuse_gets_kafkas_error_codes_and_changes_nothing() -> None:
    net, leader = three_voters_and_observers(4, 5)
    follower = next(c for c in net.cores.values() if c.is_voter and c is not leader)
    cases = [
        (follower, AddVoterRequest(CLUSTER, 5000, 4, DIRS[4], endpoints(4)),
         ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (leader, AddVoterRequest("other", 5000, 4, DIRS[4], endpoints(4)),
         ErrorCode.INCONSISTENT_CLUSTER_ID),
        (leader, AddVoterRequest(CLUSTER, 5000, 2, DIRS[2], endpoints(2)),
         ErrorCode.DUPLICATE_VOTER),
        (leader, AddVoterRequest(CLUSTER, 5000, 4, uuid.UUID(int=77), endpoints(4)),
         ErrorCode.REQUEST_TIMED_OUT),  # not the directory node 4 fetches with
        (leader, AddVoterRequest(CLUSTER, 5000, 9, DIRS[9], endpoints(9)),
         ErrorCode.REQUEST_TIMED_OUT),  # nobody fetches as node 9
        (leader, AddVoterRequest(CLUSTER, 5000, 4, DIRS[4], ()), ErrorCode.INVALID_REQUEST),
        (leader, RemoveVoterRequest(CLUSTER, 7, DIRS[7]), ErrorCode.VOTER_NOT_FOUND),
    ]
    end = leader.log.end_offset()
    for node, request, expected in cases:
        reply = ask(net, node, request, 5)
        assert isinstance(reply, VoterChangeResponse)
        assert reply.error == expected, (request, reply)
        assert reply.message
    assert leader.log.end_offset() == end and leader.voters == (1, 2, 3)
    # Two changes at once: the second waits for the first (REQUEST_TIMED_OUT, Kafka's code).
    first, second = ("client", "a"), ("client", "b")
    leader.handle_request(net.now, 0, first, AddVoterRequest(CLUSTER, 5000, 4, DIRS[4],
                                                             endpoints(4)))
    leader.handle_request(net.now, 0, second, AddVoterRequest(CLUSTER, 5000, 5, DIRS[5],
                                                              endpoints(5)))
    net.pump(60)
    assert net.client_replies[first].error == ErrorCode.NONE  # type: ignore[union-attr]
    assert net.client_replies[second].error == ErrorCode.REQUEST_TIMED_OUT  # type: ignore[union-attr]
    assert leader.voters == (1, 2, 3, 4)
    assert add(net, leader, 5).error == ErrorCode.NONE  # type: ignore[union-attr]
    assert leader.voters == (1, 2, 3, 4, 5)


def test_a_static_voter_is_removed_only_under_the_directory_it_fetches_with() -> None:
    """A static voter set lists no directory ids (NIL matches any), but the leader has seen
    each voter fetch with its own: a request naming another directory (another incarnation of
    that voter) is VOTER_NOT_FOUND, and nothing changes; the right one removes it."""
    net, leader = three_voters_and_observers()
    victim = next(v for v in (1, 2, 3) if v != leader.node_id)
    end = leader.log.end_offset()
    reply = ask(net, leader, RemoveVoterRequest(CLUSTER, victim, uuid.UUID(int=77)), 5)
    assert reply.error == ErrorCode.VOTER_NOT_FOUND, reply  # type: ignore[union-attr]
    assert leader.log.end_offset() == end and leader.voters == (1, 2, 3)
    reply = ask(net, leader, RemoveVoterRequest(CLUSTER, victim, DIRS[victim]))
    assert reply.error == ErrorCode.NONE, reply  # type: ignore[union-attr]
    assert victim not in leader.voters


def test_the_last_voter_cannot_be_removed() -> None:
    net = Net()
    only = start(net, 1, voters=(1,))
    elect(net)
    reply = ask(net, only, RemoveVoterRequest(CLUSTER, 1, DIRS[1]), 5)
    assert reply.error == ErrorCode.INVALID_REQUEST  # type: ignore[union-attr]
    assert only.voters == (1,) and only.role is Role.LEADER


def test_a_leader_that_removes_itself_steps_down_once_committed_and_keeps_following() -> None:
    net, leader = three_voters_and_observers()
    old = leader.node_id
    reply = ask(net, leader, RemoveVoterRequest(CLUSTER, old, DIRS[old]), 20)
    assert reply.error == ErrorCode.NONE  # type: ignore[union-attr]
    net.now += 100
    net.pump(100)
    assert not leader.is_voter and leader.role is not Role.LEADER
    new = elect(net)
    assert new.node_id != old
    assert new.voters == tuple(sorted({1, 2, 3} - {old}))
    append(net, new)
    net.pump(50)
    assert leader.log.end_offset() == new.log.end_offset()  # it follows as an observer
    assert leader.high_watermark == new.high_watermark


def test_removing_and_re_adding_a_voter_under_a_new_directory() -> None:
    net, leader = three_voters_and_observers()
    victim = next(i for i in (1, 2, 3) if i != leader.node_id)
    # Its disk is replaced: it comes back with a new directory id and an empty log (the shell
    # tells the core its disk was lost: it catches up before it votes).
    del net.cores[victim]
    append(net, leader)
    assert ask(net, leader, RemoveVoterRequest(CLUSTER, victim, DIRS[victim])).error == 0  # type: ignore[union-attr]
    fresh = uuid.UUID(int=0xBEEF)
    back = start(net, victim, directory=fresh, disk_lost=True)
    net.pump(100)
    assert not back.is_voter and back.log.end_offset() == leader.log.end_offset()
    assert add(net, leader, victim, fresh).error == ErrorCode.NONE  # type: ignore[union-attr]
    net.pump(30)
    assert back.is_voter and leader.voter_set.get(victim).directory_id == fresh  # type: ignore[union-attr]


def test_a_restarted_node_adopts_the_voter_set_from_its_log() -> None:
    net, leader = three_voters_and_observers(4)
    assert add(net, leader, 4).error == ErrorCode.NONE  # type: ignore[union-attr]
    net.pump(30)
    log = net.cores[4].log
    del net.cores[4]
    again = start(net, 4, log=log)  # type: ignore[arg-type]
    assert again.is_voter and again.voters == (1, 2, 3, 4)
    # The same id with another directory is not that voter.
    other = RaftCore(node_id=4, cluster_id=CLUSTER, voters=(1, 2, 3), log=log, config=CONFIG,
                     rng=random.Random(9), now_ms=net.now, directory_id=uuid.UUID(int=5))
    assert not other.is_voter


def test_who_may_grant_votes_outside_the_set_in_force() -> None:
    net, leader = three_voters_and_observers(4)
    assert add(net, leader, 4).error == ErrorCode.NONE  # type: ignore[union-attr]
    net.pump(30)
    log = net.cores[4].log
    # Voter 4's id with another disk: not the voter, and it grants no votes as one.
    other = RaftCore(node_id=4, cluster_id=CLUSTER, voters=(1, 2, 3), log=log, config=CONFIG,
                     rng=random.Random(9), now_ms=net.now, directory_id=uuid.UUID(int=5))
    assert not other.is_voter and not other.may_grant_votes
    # A leader that appended its own removal and lost leadership before it committed: no
    # longer a voter (it never campaigns), but it still answers votes for the older set.
    old = leader.node_id
    leader.handle_request(net.now, 0, ("client", "rm"),
                          RemoveVoterRequest(CLUSTER, old, DIRS[old]))
    leader.take_ready()  # nothing of it leaves the node: the removal stays uncommitted
    leader.observe_epoch(leader.epoch + 1, -1)
    assert not leader.is_voter and leader.may_grant_votes and leader.role is Role.UNATTACHED


def test_a_voter_that_has_not_fetched_its_own_addition_grants_votes() -> None:
    """Added by the quorum's first VotersRecord, which it has not fetched: its log is still the
    static set's, it is no voter in its own eyes (it never campaigns), but a candidate of the
    new set counts on its vote, and it grants one (seed 422352: refusing left a set with no
    majority able to elect anyone)."""
    from kraft_spark.raft.messages import VoteRequest, VoteResponse

    net = Net()
    behind = start(net, 4, voters=(1, 2, 3))  # a log without any VotersRecord
    assert not behind.history.dynamic and not behind.is_voter and not behind.may_vote
    assert behind.may_grant_votes
    for pre_vote in (True, False):
        behind.handle_request(net.now, 1, ("n1", pre_vote), VoteRequest(
            CLUSTER, behind.epoch + 1, 1, 0, 0, voter_id=4, voter_directory_id=DIRS[4],
            pre_vote=pre_vote))
        answers = [r.message for r in behind.take_ready().replies]
        assert [(type(a), a.vote_granted) for a in answers if isinstance(a, VoteResponse)] == [
            (VoteResponse, True)], (pre_vote, answers)
    assert behind.role is not Role.CANDIDATE and behind.voted_id == 1


def test_an_observer_that_has_not_caught_up_is_not_added() -> None:
    """KIP-853's catch-up rule, which the simulator's injected bug uncaught-voter breaks: an
    observer that stopped fetching and fell behind is refused (REQUEST_TIMED_OUT: it did not
    catch up in time), so a new voter can never leave the quorum waiting for it."""
    from kraft_spark.sim.bugs import UncaughtVoter

    for core_class, expected in ((RaftCore, ErrorCode.REQUEST_TIMED_OUT),
                                 (UncaughtVoter, ErrorCode.NONE)):
        net, _ = three_voters_and_observers(4)
        observer = net.cores.pop(4)  # it stops fetching
        leader = leader_of(net)
        # The same state, the rule of the core under test (its part that adds voters).
        leader.voter_changes.__class__ = core_class.voter_changes_class
        append(net, leader, 30)
        net.pump(2500)  # 2.5 s without a fetch from it: longer than the fetch timeout
        reply = add(net, leader, 4)
        assert isinstance(reply, VoterChangeResponse) and reply.error == expected, (
            core_class.__name__, reply)
        assert (4 in leader.voters) == (expected == ErrorCode.NONE)
        assert observer.log.end_offset() < leader.log.end_offset()
