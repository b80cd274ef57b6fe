"""A simulated node: its process state (alive, paused, incarnation), its disk (log, quorum-state,
directory id) and its core, as the cluster drives them."""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.state import PersistedState
from kraft_spark.raft.voter_set import NIL_DIRECTORY
from kraft_spark.sim.memlog import MemoryLog


@dataclass(slots=True)
class SimNode:
    node_id: int
    is_voter: bool  # in the initial (static) voter set
    log: MemoryLog
    # KIP-853: this disk's directory id (a new one when the disk is lost), used only when the
    # simulation changes voters (``reconfig``); NIL otherwise, matching any directory.
    directory_id: uuid.UUID = NIL_DIRECTORY
    core: RaftCore | None = None
    persisted: PersistedState | None = None  # the durable quorum-state file
    incarnation: int = 0
    alive: bool = False
    paused: bool = False
    wiped: bool = False  # lost its disk; excused from the majority check until caught up
    damaged_at: int | None = None  # a damaged batch found here: the restart cuts the log
    # Messages still in flight from incarnations up to this one are lost (see crash()).
    silenced_incarnation: int = 0
    inbox: deque[tuple[int, Any]] = field(default_factory=deque)  # held while paused
    wake_at: int = -1
    flushing: bool = False
    flush_again: bool = False
