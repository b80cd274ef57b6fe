"""Trace of a simulation: every delivery, role change and fault, formatted only when shown.

Entries are stored raw in a bounded ring (cheap enough to record on every event) and formatted
when printed: live with ``--trace``, or the recent ones when an invariant is violated.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from kraft_spark.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
    VoteRequest,
    VoteResponse,
)

Entry = tuple[int, int | None, int | None, Any]


def _who(node: int | None) -> str:
    if node is None:
        return "sim"
    return f"n{node}" if node >= 0 else f"client{-node}"


def describe(msg: Any) -> str:
    """One short line per message; deterministic (no ids or addresses)."""
    if isinstance(msg, str):
        return msg
    if isinstance(msg, VoteRequest):
        return (
            f"{'PreVote' if msg.pre_vote else 'Vote'}(epoch={msg.candidate_epoch} "
            f"cand={msg.candidate_id} "
            f"last=({msg.last_offset_epoch},{msg.last_offset}))"
        )
    if isinstance(msg, VoteResponse):
        return f"VoteResp({msg.error.name} granted={msg.vote_granted} e={msg.leader_epoch})"
    if isinstance(msg, BeginQuorumEpochRequest):
        return f"BeginQuorumEpoch(leader={msg.leader_id} e={msg.leader_epoch})"
    if isinstance(msg, BeginQuorumEpochResponse | EndQuorumEpochResponse):
        return f"{type(msg).__name__}({msg.error.name} e={msg.leader_epoch})"
    if isinstance(msg, EndQuorumEpochRequest):
        return f"EndQuorumEpoch(leader={msg.leader_id} e={msg.leader_epoch} succ={list(msg.preferred_successors)})"  # noqa: E501
    if isinstance(msg, FetchRequest):
        return (
            f"Fetch(replica={msg.replica_id} e={msg.current_leader_epoch} "
            f"off={msg.fetch_offset} last_e={msg.last_fetched_epoch})"
        )
    if isinstance(msg, FetchResponse):
        extra = ""
        if msg.diverging_epoch is not None:
            extra = f" diverging=({msg.diverging_epoch.epoch},{msg.diverging_epoch.offset})"
        elif msg.batches:
            extra = f" [{msg.batches[0].base_offset}..{msg.batches[-1].last_offset}]"
        return (
            f"FetchResp({msg.error.name} leader={msg.leader_id} e={msg.leader_epoch} "
            f"hw={msg.high_watermark}{extra})"
        )
    if isinstance(msg, ProduceRequest):
        return f"Produce(pid={msg.producer_id} seq={msg.base_sequence} n={len(msg.records)})"
    if isinstance(msg, ProduceResponse):
        return f"ProduceResp({msg.error.name} off={msg.base_offset} e={msg.epoch})"
    if isinstance(msg, DescribeQuorumRequest | DescribeQuorumResponse):
        return type(msg).__name__
    return repr(msg)


class Trace:
    def __init__(self, keep: int = 60, echo: Callable[[str], None] | None = None) -> None:
        self._recent: deque[Entry] = deque(maxlen=keep)
        self._echo = echo

    def add(self, now_us: int, node: int | None, src: int | None, item: Any) -> None:
        entry = (now_us, node, src, item)
        self._recent.append(entry)
        if self._echo is not None:
            self._echo(format_entry(entry))

    def recent(self) -> list[str]:
        return [format_entry(e) for e in self._recent]


def format_entry(entry: Entry) -> str:
    now_us, node, src, item = entry
    head = f"{now_us / 1000:12.3f}ms {_who(node):>8}"
    if src is not None:
        return f"{head} <- {_who(src)} {describe(item)}"
    return f"{head} {describe(item)}"
