"""Cores wired to each other in one process, for tests of the core's rules across nodes."""

from __future__ import annotations

from collections.abc import Callable

from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.messages import ErrorCode, Response, VoteRequest, VoteResponse
from kraft_spark.raft.state import Role

Tamper = Callable[[Response], Response]


class Net:
    """Cores wired to each other; ``pump`` delivers everything until the network is quiet."""

    def __init__(self) -> None:
        self.cores: dict[int, RaftCore] = {}
        self.now = 1000
        self.installed: dict[int, list[OffsetAndEpoch]] = {}
        self.tamper: Tamper | None = None
        # Answers to requests that did not come from a core (clients), by token.
        self.client_replies: dict[object, Response] = {}

    def pump(self, rounds: int = 200) -> None:
        for _ in range(rounds):
            self.now += 1
            for nid, core in self.cores.items():
                core.poll(self.now)
                ready = core.take_ready()
                if ready.snapshot_installed is not None:
                    self.installed.setdefault(nid, []).append(ready.snapshot_installed)
                if ready.flush_log:
                    core.log.flush()
                    core.on_log_flushed(self.now)
                for out in ready.sends:
                    if out.dest not in self.cores:
                        continue  # a node that is down
                    self.cores[out.dest].handle_request(
                        self.now, nid, (nid, out.request_id), out.message
                    )
                for reply in ready.replies:
                    src, rid = reply.token  # type: ignore[misc]
                    if src not in self.cores:
                        self.client_replies[reply.token] = reply.message
                        continue
                    message = reply.message
                    if self.tamper is not None:
                        message = self.tamper(message)
                    self.cores[src].handle_response(self.now, nid, rid, message)


def elect(net: Net, rounds: int = 50) -> RaftCore:
    """Let election timeouts pass and pump until one core leads; that core."""
    net.now += 5000
    for _ in range(rounds):
        net.pump(100)
        leaders = [c for c in net.cores.values() if c.role is Role.LEADER]
        if leaders:
            return leaders[0]
    raise AssertionError(f"no leader after {rounds} rounds")


def grant_pre_votes(core: RaftCore, now: int) -> None:
    """Answer every pre-vote a Prospective ``core`` has out with a grant (KIP-996), so that it
    becomes a Candidate: for tests about what happens once an election runs."""
    assert core.role is Role.PROSPECTIVE, core.describe_role()
    for out in core.take_ready().sends:
        if isinstance(out.message, VoteRequest) and out.message.pre_vote:
            core.handle_response(now, out.dest, out.request_id,
                                 VoteResponse(ErrorCode.NONE, -1, core.epoch, True))
    assert core.role is Role.CANDIDATE, core.describe_role()
