"""The vocabulary of scripted scenarios: the harness's constants and errors, its nodes and
in-flight messages, command arguments, and how logs and answers are printed."""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.messages import (
    NO_LEADER,
    DescribeQuorumResponse,
    Request,
    Response,
)
from kraft_spark.raft.records import Batch, decode_leader_change
from kraft_spark.raft.state import PersistedState
from kraft_spark.raft.voter_records import voters_in
from kraft_spark.sim.memlog import MemoryLog

CLUSTER_ID = "scenario-cluster-00000"
CLIENT_ID = -1
DEFAULT_PRODUCE_TIMEOUT_MS = 10_000
RESTART_SEED_STRIDE = 1000
# stabilize gives up (a livelock in the core, or a script error) after this many rounds.
MAX_STABILIZE_ROUNDS = 100
# A timer that stays due after this many polls at the same instant is a busy loop.
MAX_POLLS_AT_ONE_INSTANT = 5


class ScenarioError(Exception):
    """A malformed command or a command that cannot run in the current state."""


class ScenarioAssertionError(AssertionError):
    """An ``expect-*`` command found the cluster in another state than the script asserts."""


@dataclass(slots=True)
class Envelope:
    """A message in flight: a request (``request_id`` is the sender's) or a reply to one."""

    seq: int
    src: int
    dst: int
    is_request: bool
    request_id: int
    message: Request | Response
    # Incarnation of the receiver when sent: a restart in between closed that connection.
    dst_incarnation: int
    # The two ends were partitioned when it was sent.
    blocked_at_send: bool


@dataclass(slots=True)
class ScriptNode:
    node_id: int
    is_voter: bool
    log: MemoryLog = field(default_factory=MemoryLog)
    core: RaftCore | None = None
    persisted: PersistedState | None = None  # the durable quorum-state
    clock: int = 0
    incarnation: int = 0
    outbox: list[Envelope] = field(default_factory=list)
    flush_requested: bool = False

    def needs_flush(self) -> bool:
        log = self.log
        return (
            self.flush_requested
            or log.flushed_offset() < log.end_offset()
            or log.durable_batches() != log.batches()
        )


def message_type(message: Request | Response) -> str:
    """The short type name used by ``deliver type=...``: Vote, VoteResp, Fetch, FetchResp..."""
    name = type(message).__name__
    if name.endswith("Request"):
        return name.removesuffix("Request")
    return name.removesuffix("Response") + "Resp"


def fmt_id(value: int) -> str:
    return "-" if value == NO_LEADER else str(value)


def parse_bool(value: str) -> bool:
    if value in ("true", "yes", "1"):
        return True
    if value in ("false", "no", "0"):
        return False
    raise ScenarioError(f"expected true or false, got {value!r}")


def parse_int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ScenarioError(f"{what} must be an integer, got {value!r}") from None


@dataclass(slots=True)
class Args:
    """A command's arguments: positional words and ``key=value`` pairs."""

    positional: list[str]
    options: dict[str, str]
    used: set[str] = field(default_factory=set)

    @classmethod
    def parse(cls, words: list[str]) -> Args:
        positional: list[str] = []
        options: dict[str, str] = {}
        for word in words:
            key, sep, value = word.partition("=")
            if sep:
                options[key] = value
            else:
                positional.append(word)
        return cls(positional, options)

    def opt(self, key: str, default: str | None = None) -> str | None:
        self.used.add(key)
        return self.options.get(key, default)

    def node(self) -> int:
        """The node a command targets: the first positional word, or ``node=ID``."""
        self.used.add("node")
        if "node" in self.options:
            return parse_int(self.options["node"], "node")
        if not self.positional:
            raise ScenarioError("missing node id")
        return parse_int(self.positional.pop(0), "node")

    def int_opt(self, key: str, default: int | None = None) -> int:
        raw = self.opt(key)
        if raw is None:
            if default is None:
                raise ScenarioError(f"missing {key}=")
            return default
        return parse_int(raw, key)

    def finish(self) -> None:
        unknown = sorted(set(self.options) - self.used)
        if unknown:
            raise ScenarioError(f"unknown option(s): {', '.join(unknown)}")
        if self.positional:
            raise ScenarioError(f"unexpected argument(s): {' '.join(self.positional)}")


def quorum_lines(resp: DescribeQuorumResponse) -> list[str]:
    lines = [f"leader={fmt_id(resp.leader_id)} epoch={resp.leader_epoch} hw={resp.high_watermark}"]
    for kind, replicas in (("voter", resp.voters), ("observer", resp.observers)):
        for r in replicas:
            lines.append(
                f"{kind} n{r.replica_id} end={r.log_end_offset} "
                f"last_fetch={r.last_fetch_timestamp} last_caught_up={r.last_caught_up_timestamp}"
            )
    return lines


def data_values(batches: list[Batch]) -> list[str]:
    values: list[str] = []
    for batch in batches:
        if batch.is_control:
            continue
        for record in batch.records:
            values.append("" if record.value is None else record.value.decode(errors="replace"))
    return values


def log_summary(log: MemoryLog) -> str:
    return "[" + " ".join(f"{b.base_offset}:e{b.epoch}" for b in log.batches()) + "]"


def batch_body(batch: Batch) -> str:
    if batch.is_control:
        value = batch.records[0].value or b""
        voters = voters_in(batch)
        if voters is not None:
            return f"Voters({list(voters.ids())})"
        try:
            change = decode_leader_change(value)
        except ValueError:
            return "control (undecodable)"
        return (
            f"LeaderChange(leader={change.leader_id} voters={list(change.voters)} "
            f"granting={list(change.granting_voters)})"
        )
    return "data " + ",".join(data_values([batch]))
