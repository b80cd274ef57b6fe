"""The ``expect-*`` commands of scripted scenarios: assertions on roles, epochs, offsets, data
and pending messages; a failed one raises ``ScenarioAssertionError``."""

from __future__ import annotations

from collections.abc import Callable

from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.state import Role
from kraft_spark.sim.script_base import (
    Args,
    Envelope,
    ScenarioAssertionError,
    ScenarioError,
    ScriptNode,
    data_values,
    log_summary,
    parse_bool,
    parse_int,
)


class ExpectCommands:
    """Mixed into ``ScriptedCluster``, which provides the node lookups below."""

    def node(self, node_id: int) -> ScriptNode:
        raise NotImplementedError

    def core(self, node_id: int) -> RaftCore:
        raise NotImplementedError

    def _role_name(self, node: ScriptNode) -> str:
        raise NotImplementedError

    def _select(self, args: Args) -> list[Envelope]:
        raise NotImplementedError

    def _line(self, env: Envelope) -> str:
        raise NotImplementedError


    def _fail(self, message: str) -> None:
        raise ScenarioAssertionError(message)

    def _expect_int(
        self, args: Args, what: str, get: Callable[[RaftCore, ScriptNode], int]
    ) -> None:
        node = self.node(args.node())
        if not args.positional:
            raise ScenarioError(f"expect-{what} ID N")
        want = parse_int(args.positional.pop(0), what)
        core = self.core(node.node_id)
        got = get(core, node)
        if got != want:
            self._fail(f"n{node.node_id}: expected {what} {want}, got {got}")

    def cmd_expect_role(self, args: Args) -> None:
        node = self.node(args.node())
        if not args.positional:
            raise ScenarioError("expect-role ID ROLE")
        want = args.positional.pop(0)
        valid = [r.value for r in Role] + ["Down"]
        if want not in valid:
            raise ScenarioError(f"role must be one of {', '.join(valid)}")
        got = self._role_name(node)
        if got != want:
            self._fail(f"n{node.node_id}: expected role {want}, got {got}")

    def cmd_expect_epoch(self, args: Args) -> None:
        self._expect_int(args, "epoch", lambda c, n: c.epoch)

    def cmd_expect_leader(self, args: Args) -> None:
        self._expect_int(args, "leader", lambda c, n: c.known_leader())

    def cmd_expect_voted(self, args: Args) -> None:
        self._expect_int(args, "voted", lambda c, n: c.voted_id)

    def cmd_expect_hw(self, args: Args) -> None:
        self._expect_int(args, "hw", lambda c, n: c.high_watermark)

    def cmd_expect_log_end(self, args: Args) -> None:
        self._expect_int(args, "log-end", lambda c, n: n.log.end_offset())

    def cmd_expect_flushed(self, args: Args) -> None:
        self._expect_int(args, "flushed", lambda c, n: n.log.flushed_offset())

    def cmd_expect_catching_up(self, args: Args) -> None:
        node = self.node(args.node())
        if not args.positional:
            raise ScenarioError("expect-catching-up ID true|false")
        want = parse_bool(args.positional.pop(0))
        got = self.core(node.node_id).pending_catch_up
        if got != want:
            self._fail(f"n{node.node_id}: expected catching-up {want}, got {got}")

    def cmd_expect_data(self, args: Args) -> None:
        node = self.node(args.node())
        if not args.positional:
            raise ScenarioError("expect-data ID V1,V2,... (or -)")
        raw = args.positional.pop(0)
        want = [] if raw == "-" else raw.split(",")
        got = data_values(node.log.batches())
        if got != want:
            self._fail(f"n{node.node_id}: expected data {want}, got {got}")

    def cmd_expect_pending(self, args: Args) -> None:
        if not args.positional:
            raise ScenarioError("expect-pending N [from=A] [to=B] [type=T]")
        want = parse_int(args.positional.pop(0), "N")
        chosen = self._select(args)
        if len(chosen) != want:
            listed = "; ".join(self._line(env) for env in chosen) or "none"
            self._fail(f"expected {want} matching pending message(s), got {len(chosen)}: {listed}")

    def cmd_expect_converged(self, args: Args) -> None:
        if len(args.positional) != 1:
            raise ScenarioError("expect-converged A,B,...")
        ids = [parse_int(x, "node") for x in args.positional.pop().split(",")]
        first = self.node(ids[0])
        for other_id in ids[1:]:
            other = self.node(other_id)
            if other.log.batches() != first.log.batches():
                self._fail(
                    f"logs of n{first.node_id} and n{other_id} differ: "
                    f"{log_summary(first.log)} vs {log_summary(other.log)}"
                )
